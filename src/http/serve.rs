//! The HTTP/1.1 server loop, written for a crowd that holds connections open and mostly idle.
//!
//! `axum::serve` keeps hyper's read and write buffers (8 KiB each) for every open connection,
//! busy or not: 10,000 shoppers' keep-alive connections cost 170 MiB. Here a connection that
//! has had no request for [`PARK_AFTER`] is handed back by hyper and parked as a bare socket;
//! its next bytes wake it and a fresh hyper connection, with fresh buffers, serves them. Bytes
//! hyper had read but not yet used are replayed to the next one, so nothing is lost in the
//! hand-over. Parking frees memory inside the allocator, and every few seconds after parking
//! the freed pages are handed back to the system.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::{Buf, Bytes};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt;

/// How many finished handshakes the kernel may queue for `accept`. A flash sale's crowd connects
/// within the same second; past the queue's end the kernel drops the handshake, and the shopper's
/// system tries again only after a second (then three). tokio's `TcpListener::bind` asks for
/// 128, which 256 shoppers connecting at once overflowed. The kernel caps the queue at
/// `net.core.somaxconn` (4096 by default since Linux 5.4).
pub const LISTEN_BACKLOG: u32 = 65_535;

/// A listener on `addr` whose queue holds a crowd's connections (see [`LISTEN_BACKLOG`]).
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // A restarted server binds at once, as with `TcpListener::bind`.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How long a connection may go without a request before its buffers are given back.
pub const PARK_AFTER: Duration = Duration::from_secs(1);
/// How often memory freed by parked connections is handed back to the system.
const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish and closes every connection.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    // Every connection holds a receiver: `send` tells them to stop, and `closed` waits for
    // the last one to drop its receiver.
    let (stop, stopped) = watch::channel(());
    let parkings = Arc::new(AtomicU64::new(0));
    let mut trim = tokio::time::interval(TRIM_EVERY);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let stopped = stopped.clone();
                    tokio::spawn(connection(stream, peer, router.clone(), stopped, parkings.clone()));
                }
                // Out of file descriptors and the like: let some connections close first.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = trim.tick() => if parkings.swap(0, Ordering::Relaxed) > 0 {
                tokio::task::spawn_blocking(give_back_freed_memory);
            },
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drop(stopped);
    let _ = stop.send(());
    stop.closed().await;
}

/// A connection between requests: the socket and any bytes already read from it.
struct Parked {
    stream: TcpStream,
    unread: Bytes,
}

/// One connection, from accept to close, parked whenever it idles.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    mut stop: watch::Receiver<()>,
    parkings: Arc<AtomicU64>,
) {
    let mut parked = Parked {
        stream,
        unread: Bytes::new(),
    };
    loop {
        if parked.unread.is_empty() {
            tokio::select! {
                ready = parked.stream.readable() => if ready.is_err() { return },
                _ = stop.changed() => return,
            }
        }
        match serve_until_idle(parked, peer, &router, &mut stop).await {
            Some(next) => {
                parkings.fetch_add(1, Ordering::Relaxed);
                parked = next;
            }
            None => return,
        }
    }
}

/// What happened on one connection: bytes read, requests begun and requests answered.
#[derive(Default)]
struct Activity {
    read: AtomicU64,
    begun: AtomicU64,
    answered: AtomicU64,
}

impl Activity {
    /// A mark that changes whenever anything happens on the connection.
    fn mark(&self) -> (u64, u64) {
        (
            self.read.load(Ordering::Relaxed),
            self.begun.load(Ordering::Relaxed),
        )
    }

    fn answering(&self) -> bool {
        self.answered.load(Ordering::Relaxed) != self.begun.load(Ordering::Relaxed)
    }
}

/// Serves requests on `parked` until it has been idle for [`PARK_AFTER`]; then hands it back.
/// `None` when the connection is over: closed by the client, broken, or told to stop.
async fn serve_until_idle(
    parked: Parked,
    peer: SocketAddr,
    router: &Router,
    stop: &mut watch::Receiver<()>,
) -> Option<Parked> {
    let activity = Arc::new(Activity::default());
    let service = {
        let (router, activity) = (router.clone(), activity.clone());
        hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            activity.begun.fetch_add(1, Ordering::Relaxed);
            let (router, activity) = (router.clone(), activity.clone());
            Box::pin(async move {
                let response = router.oneshot(request.map(Body::new)).await;
                activity.answered.fetch_add(1, Ordering::Relaxed);
                response
            })
                as Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>
        })
    };
    let io = TokioIo::new(Replay(parked, activity.clone()));
    // Boxed, so a parked connection's task does not carry hyper's state in its own size.
    let mut http = Box::new(http1::Builder::new().serve_connection(io, service));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + PARK_AFTER, PARK_AFTER);
    let mut seen = activity.mark();
    let (mut parking, mut stopping) = (false, false);
    loop {
        tokio::select! {
            done = std::future::poll_fn(|cx| http.poll_without_shutdown(cx)) => {
                done.ok()?;
                // Unless parked on purpose, hyper is done because the client closed.
                if stopping || !parking {
                    return None;
                }
                let parts = http.into_parts();
                let Replay(mut parked, _) = parts.io.into_inner();
                // Bytes of the next request that hyper read but did not use come first.
                parked.unread = [parts.read_buf, parked.unread].concat().into();
                return Some(parked);
            }
            _ = tick.tick(), if !parking && !stopping => {
                let mark = activity.mark();
                if mark == seen && !activity.answering() {
                    // Idle: hyper hands the connection back now. (Had a request's first
                    // bytes sat unfinished for a whole period, hyper answers it first, with
                    // `Connection: close`.)
                    Pin::new(&mut *http).graceful_shutdown();
                    parking = true;
                }
                seen = mark;
            }
            _ = stop.changed(), if !stopping => {
                Pin::new(&mut *http).graceful_shutdown();
                stopping = true;
            }
        }
    }
}

/// Hands memory that glibc keeps for reuse back to the system. After a burst of thousands of
/// connections, the buffers their parking freed lie scattered inside the heap, where glibc's
/// ordinary trimming (only at the heap's top) never reaches them: tens of MiB the process no
/// longer uses.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer of ours and only walks glibc's own free lists,
    // under glibc's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A parked connection's socket that first replays the bytes read before it was parked, and
/// counts what it reads.
struct Replay(Parked, Arc<Activity>);

impl AsyncRead for Replay {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let unread = &mut self.0.unread;
        if unread.is_empty() {
            let before = buf.filled().len();
            let read = Pin::new(&mut self.0.stream).poll_read(cx, buf);
            let n = buf.filled().len() - before;
            self.1.read.fetch_add(n as u64, Ordering::Relaxed);
            return read;
        }
        let n = unread.len().min(buf.remaining());
        buf.put_slice(&unread[..n]);
        unread.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Replay {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0.stream).poll_shutdown(cx)
    }
}
