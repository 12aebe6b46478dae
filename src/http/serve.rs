//! The HTTP/1.1 server loop, written for a crowd that holds connections open and mostly idle.
//!
//! `axum::serve` keeps hyper's read and write buffers (8 KiB each) for every open connection,
//! busy or not: 10,000 shoppers' keep-alive connections cost 170 MiB. Here a connection that
//! has had no request for [`PARK_AFTER`] is handed back by hyper and parked as a bare socket;
//! its next bytes wake it and a fresh hyper connection, with fresh buffers, serves them. Bytes
//! hyper had read but not yet used are replayed to the next one, so nothing is lost in the
//! hand-over. Parking frees memory inside the allocator, and every few seconds after parking
//! the freed pages are handed back to the system.
//!
//! With more than [`CROWD`] connections open, a connection is parked as soon as it is between
//! requests: a crowd of ten thousand, arriving or busy, then costs the buffers of the requests
//! in progress, not those of every connection.

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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
/// Open connections past which a connection is parked as soon as it is between requests, not
/// after [`PARK_AFTER`]. When a crowd holds ten thousand connections, each one's 16 KiB of
/// buffers would add up to more than the rest of the server while the crowd is still arriving
/// or busy; parked at once, only the connections with a request in progress keep theirs. Below
/// this, a busy connection keeps its buffers and saves making them again for every request.
pub const CROWD: usize = 1_000;
/// How often memory freed by parked connections is handed back to the system.
const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish and closes every connection.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    serve_crowd(listener, router, shutdown, CROWD).await
}

/// [`serve`], parking connections as soon as they are between requests once more than `crowd`
/// are open (see [`CROWD`]).
pub async fn serve_crowd(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    crowd: usize,
) {
    // Every connection holds a receiver: `send` tells them to stop, and `closed` waits for
    // the last one to drop its receiver.
    let (stop, stopped) = watch::channel(());
    let connections = Arc::new(Connections {
        crowd,
        ..Connections::default()
    });
    let mut trim = tokio::time::interval(TRIM_EVERY);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let stopped = stopped.clone();
                    let open = Open::count(connections.clone());
                    tokio::spawn(connection(stream, peer, router.clone(), stopped, open));
                }
                // Out of file descriptors and the like: let some connections close first.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = trim.tick() => if connections.parkings.swap(0, Ordering::Relaxed) > 0 {
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

/// What the server loop and its connections share.
#[derive(Default)]
struct Connections {
    /// Connections open now.
    open: AtomicUsize,
    /// Connections parked since the memory was last handed back.
    parkings: AtomicU64,
    /// Open connections past which they are parked as soon as they are between requests.
    crowd: usize,
}

impl Connections {
    fn crowded(&self) -> bool {
        self.open.load(Ordering::Relaxed) > self.crowd
    }
}

/// One open connection, counted while it lives.
struct Open(Arc<Connections>);

impl Open {
    fn count(connections: Arc<Connections>) -> Self {
        connections.open.fetch_add(1, Ordering::Relaxed);
        Self(connections)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
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
    open: Open,
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
        match serve_until_idle(parked, peer, &router, &mut stop, &open.0).await {
            Some(next) => {
                open.0.parkings.fetch_add(1, Ordering::Relaxed);
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
    /// Requests begun when bytes last arrived: fewer than begun now means every byte read so
    /// far belonged to requests already begun (bar a pipelined next one, which hyper hands
    /// back on parking).
    begun_at_last_read: AtomicU64,
    /// The socket took no more of the answer at the last try: hyper still holds some of it.
    write_blocked: AtomicBool,
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

    /// Every request read so far is answered and written out, and a request began since the
    /// last bytes arrived: the connection waits for its next request. (After a wake-up, or
    /// with the first bytes of a request in, it waits for that request to begin: parked then,
    /// it would only be woken by its own unread bytes again.)
    fn between_requests(&self) -> bool {
        !self.answering()
            && !self.write_blocked.load(Ordering::Relaxed)
            && self.begun_at_last_read.load(Ordering::Relaxed) < self.begun.load(Ordering::Relaxed)
    }

    fn bytes_arrived(&self, n: usize) {
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        let begun = self.begun.load(Ordering::Relaxed);
        self.begun_at_last_read.store(begun, Ordering::Relaxed);
    }

    fn wrote<T>(&self, attempt: Poll<T>) -> Poll<T> {
        self.write_blocked
            .store(attempt.is_pending(), Ordering::Relaxed);
        attempt
    }
}

/// Serves requests on `parked` until it has been idle for [`PARK_AFTER`], or until it is
/// between requests while the server is crowded; then hands it back. `None` when the
/// connection is over: closed by the client, broken, or told to stop.
async fn serve_until_idle(
    parked: Parked,
    peer: SocketAddr,
    router: &Router,
    stop: &mut watch::Receiver<()>,
    connections: &Connections,
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
    let (mut parking, mut stopping, mut parking_at_once) = (false, false, false);
    loop {
        tokio::select! {
            done = std::future::poll_fn(|cx| {
                let polled = http.poll_without_shutdown(cx);
                if polled.is_pending()
                    && !parking_at_once
                    && connections.crowded()
                    && activity.between_requests()
                {
                    // Idle between requests, hyper hands the connection back at once.
                    Pin::new(&mut *http).graceful_shutdown();
                    parking_at_once = true;
                    return http.poll_without_shutdown(cx);
                }
                polled
            }) => {
                done.ok()?;
                // Unless parked on purpose, hyper is done because the client closed.
                if stopping || !(parking || parking_at_once) {
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
            if n > 0 {
                self.1.bytes_arrived(n);
            }
            return read;
        }
        let n = unread.len().min(buf.remaining());
        buf.put_slice(&unread[..n]);
        unread.advance(n);
        self.1.bytes_arrived(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Replay {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let attempt = Pin::new(&mut self.0.stream).poll_write(cx, buf);
        self.1.wrote(attempt)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let attempt = Pin::new(&mut self.0.stream).poll_write_vectored(cx, bufs);
        self.1.wrote(attempt)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_between_requests_once_all_it_read_is_answered_and_written() {
        let activity = Activity::default();
        assert!(!activity.between_requests(), "nothing asked yet");
        activity.bytes_arrived(100);
        assert!(!activity.between_requests(), "a request arriving");
        activity.begun.fetch_add(1, Ordering::Relaxed);
        assert!(!activity.between_requests(), "a request in progress");
        activity.answered.fetch_add(1, Ordering::Relaxed);
        assert!(activity.between_requests());
        let _ = activity.wrote(Poll::<()>::Pending);
        assert!(
            !activity.between_requests(),
            "the answer still being written"
        );
        let _ = activity.wrote(Poll::Ready(()));
        assert!(activity.between_requests());
        activity.bytes_arrived(10);
        assert!(!activity.between_requests(), "the next request arriving");
    }

    #[test]
    fn a_server_is_crowded_past_its_crowd() {
        let connections = Arc::new(Connections {
            crowd: 1,
            ..Connections::default()
        });
        let first = Open::count(connections.clone());
        assert!(!connections.crowded());
        let second = Open::count(connections.clone());
        assert!(connections.crowded());
        drop((first, second));
        assert_eq!(connections.open.load(Ordering::Relaxed), 0);
    }
}
