//! seckill's HTTP/1.1 server, written for a crowd that holds connections open and mostly idle,
//! and for clients that would hold them open to do harm:
//! `server::serve(listener, app).with_graceful_shutdown(signal).await`. It is transport only:
//! it serves any tower service of the right shape (an [`App`]: an axum `Router`, or layers
//! around one) and knows nothing of seckill's routes, state or sale, so it imports nothing of
//! ours.
//!
//! Parking: `axum::serve` keeps hyper's read and write buffers for every open connection, busy
//! or not. Here a connection that has had no request for [`PARK_AFTER`] is handed back by hyper
//! and parked as a bare socket; its next bytes wake it and a fresh hyper connection, with fresh
//! buffers, serves them. Bytes hyper had read but not yet used are replayed to the next one, so
//! nothing is lost in the hand-over. With more than [`CROWD`] connections open, a connection is
//! parked as soon as it is between requests, so a crowd costs the buffers of the requests in
//! progress, not those of every connection. Parking frees memory inside the allocator; every
//! few seconds after parking the freed pages are handed back to the system.
//!
//! Deadlines: a request's head must arrive within [`HEADER_READ_TIMEOUT`] (hyper's own timer,
//! and the parked wait of a fresh connection), a client that stalls mid-body or stops reading
//! its answer is cut off after as long, and a connection with no request for [`IDLE_TIMEOUT`]
//! is closed, parked or not. Only a request the application is working on waits without limit.
//!
//! Heads: a request's head may have at most [`MAX_HEAD_BYTES`]; a client that sends more is
//! answered `431` (the application's own answer, given with
//! [`head_refusal`](Serve::head_refusal)) and closed. The heads still arriving on all
//! connections together may hold at most [`HEAD_BUDGET`]; past it, the connections whose heads
//! have been arriving the longest are closed.
//!
//! The cap: open connections stay below the process's open-file limit (see
//! [`default_max_connections`]), so a flood of connections cannot starve the database pools or
//! the listener of file descriptors. At the cap, the connections idle or stalled the longest are
//! shed to make room; one in the middle of a request never is.

mod activity;
mod connection;
mod heads;
mod limits;
mod table;

pub use heads::{HEAD_BUDGET, MAX_HEAD_BYTES};

/// The two ends of a request's connection, in every request's extensions (one entry, for
/// both): the client's address and this server's address the client reached (its socket's
/// local address, which the client cannot choose, unlike its `Host` header).
#[derive(Clone, Copy, Debug)]
pub struct Ends {
    /// The client's address: the TCP peer.
    pub peer: SocketAddr,
    /// This server's address the client reached.
    pub local: SocketAddr,
}
pub use limits::{
    CROWD, FileLimit, HEADER_READ_TIMEOUT, IDLE_TIMEOUT, PARK_AFTER, RESERVED_FILES,
    default_max_connections, file_limit, raise_file_limit,
};

use axum::body::Body;
use bytes::Bytes;
use heads::Refusal;
use hyper::body::Body as HttpBody;
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioTimer;
use limits::Limits;
use std::convert::Infallible;
use std::future::{IntoFuture, Pending};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use table::Connections;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tower::Service;

/// What the server serves: a tower service that answers every request (its body an axum
/// `Body`, its connection's [`Ends`] in its extensions) and never fails, such as an axum `Router` or layers around
/// one. Each request is served by a clone of it, made ready first.
pub trait App:
    Service<
        Request<Body>,
        Response = Response<Self::Answer>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + Unpin
    + 'static
{
    /// The body of its answers.
    type Answer: HttpBody<Data = Bytes, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
        + Send
        + 'static;
}

impl<S, B> App for S
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible, Future: Send + 'static>
        + Clone
        + Send
        + Sync
        + Unpin
        + 'static,
    B: HttpBody<Data = Bytes, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
        + Send
        + 'static,
{
    type Answer = B;
}

/// How many finished handshakes the kernel may queue for `accept`. A flash sale's crowd connects
/// within the same second; past the queue's end the kernel drops the handshake, and the shopper's
/// system tries again only after a second (then three). tokio's `TcpListener::bind` asks for
/// far fewer than a crowd. The kernel caps the queue at `net.core.somaxconn`.
pub const LISTEN_BACKLOG: u32 = 65_535;

/// How often memory freed by parked connections is handed back to the system, and trouble
/// accepting connections is reported (at most once per period, so a flood cannot flood the log).
const TIDY_EVERY: Duration = Duration::from_secs(5);

/// How long accepting pauses after it failed for want of file descriptors: the connections shed
/// meanwhile give theirs back, and the loop never spins on an error that repeats at once.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// The least a head's bound may be: hyper reads 8 KiB at a time.
const MIN_HEAD_BYTES: usize = 8 * 1024;

/// The longest body of the answer to a head over the bound that is kept.
const MAX_REFUSAL_BYTES: usize = 4 * 1024;

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

/// Serves `app` on `listener` when awaited, with the default deadlines and cap; the
/// [`Serve`] methods change them.
pub fn serve<A: App>(listener: TcpListener, app: A) -> Serve<A> {
    Serve {
        listener,
        app,
        shutdown: std::future::pending(),
        shutdown_timeout: None,
        limits: Limits::default(),
        refusal: None,
    }
}

/// A server ready to run: await it. It runs until its shutdown signal completes (never, unless
/// [`with_graceful_shutdown`](Self::with_graceful_shutdown) gave one), then lets the requests
/// in flight finish and closes every connection.
#[must_use = "a server does nothing until it is awaited"]
pub struct Serve<A, S = Pending<()>> {
    listener: TcpListener,
    app: A,
    shutdown: S,
    /// How long the requests in progress may take once the server stops accepting; unset,
    /// as long as they take.
    shutdown_timeout: Option<Duration>,
    limits: Limits,
    /// The answer to a head over the bound; unset, a bare `431`.
    refusal: Option<Response<Body>>,
}

impl<A, S> Serve<A, S> {
    /// Stops accepting when `signal` completes, then drains.
    pub fn with_graceful_shutdown<F>(self, signal: F) -> Serve<A, F>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Serve {
            listener: self.listener,
            app: self.app,
            shutdown: signal,
            shutdown_timeout: self.shutdown_timeout,
            limits: self.limits,
            refusal: self.refusal,
        }
    }

    /// Once the shutdown signal completed, the connections still open after `timeout` (a
    /// request that takes that long, a client that holds its body or its answer back) are
    /// closed, their requests dropped, so that no client holds the server past it.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = Some(timeout);
        self
    }

    /// Parks connections as soon as they are between requests once more than `connections` are
    /// open (default [`CROWD`]).
    pub fn crowd(mut self, connections: usize) -> Self {
        self.limits.crowd = connections;
        self
    }

    /// How long a client may take to send a request's head, or stall in a request or in reading
    /// its answer (default [`HEADER_READ_TIMEOUT`]). It also bounds how long a connection
    /// waits for its next request before it is parked, so keep it above twice [`PARK_AFTER`].
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.limits.header_read = timeout;
        self
    }

    /// How long a served connection may wait for its next request (default [`IDLE_TIMEOUT`]).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.idle = timeout;
        self
    }

    /// Most connections open at once (default [`default_max_connections`], from the open-file
    /// limit when the server starts).
    pub fn max_connections(mut self, max: usize) -> Self {
        self.limits.max_connections = Some(max);
        self
    }

    /// The most bytes a request's head may have (default [`MAX_HEAD_BYTES`]; at least 8 KiB,
    /// the least hyper reads at once).
    pub fn max_head_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_head = bytes.max(MIN_HEAD_BYTES);
        self
    }

    /// The most memory the heads still arriving may hold together (default [`HEAD_BUDGET`]).
    pub fn head_budget(mut self, bytes: usize) -> Self {
        self.limits.head_budget = bytes;
        self
    }

    /// What a client whose request head is over the bound is answered, before it is closed
    /// (default: `431` with no body). Its body is read once, when the server starts.
    pub fn head_refusal(mut self, answer: Response<Body>) -> Self {
        self.refusal = Some(answer);
        self
    }
}

impl<A, S> IntoFuture for Serve<A, S>
where
    A: App,
    S: Future<Output = ()> + Send + 'static,
{
    type Output = ();
    type IntoFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run(self))
    }
}

/// The server loop: accepts, admits under the cap, tidies, and drains on shutdown.
async fn run<A, S>(server: Serve<A, S>)
where
    A: App,
    S: Future<Output = ()> + Send + 'static,
{
    let Serve {
        listener,
        app,
        shutdown,
        shutdown_timeout,
        limits,
        refusal,
    } = server;
    let max = limits
        .max_connections
        .unwrap_or_else(default_max_connections);
    let mut http = http1::Builder::new();
    // The connection counts a head's bytes and refuses a head over the bound before hyper
    // sees the byte past it; hyper's own bound, one byte more, is for the rare head the
    // connection cannot count alone (after a body left unread), and answers a bare `431`.
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(limits.max_head + 1)
        .max_header_size(limits.max_head + 1);
    let refusal = match refusal {
        Some(answer) => Refusal::render(answer, MAX_REFUSAL_BYTES).await,
        None => Refusal::plain(),
    };
    let connections = Arc::new(Connections::new(limits, max, http, refusal));
    tracing::info!(
        max_connections = max,
        header_read_timeout = ?limits.header_read,
        idle_timeout = ?limits.idle,
        "serving HTTP"
    );
    // Every connection holds a receiver: `send` tells them to stop, and `closed` waits for
    // the last one to drop its receiver.
    let (stop, stopped) = watch::channel(Stop::Serve);
    let mut tidy = tokio::time::interval(TIDY_EVERY);
    let pause = tokio::time::sleep(Duration::ZERO);
    let mut paused = false;
    // Since the last report: connections refused at the cap, and the last accept error.
    let (mut refused, mut failed) = (0u64, None::<(u64, io::Error)>);
    tokio::pin!(shutdown, pause);
    loop {
        tokio::select! {
            accepted = listener.accept(), if !paused => match accepted {
                Ok((stream, peer)) => match connections.admit() {
                    Some(open) => {
                        let _ = stream.set_nodelay(true);
                        let stopped = stopped.clone();
                        tokio::spawn(connection::connection(stream, peer, app.clone(), stopped, open));
                    }
                    // Every open connection is in a request: this one is closed at once.
                    None => refused += 1,
                },
                // The client gave up before it was accepted: nothing to wait for.
                Err(e) if is_connection_error(&e) => {}
                // Out of file descriptors, most likely.
                Err(e) => {
                    connections.shed_some();
                    pause.as_mut().reset(tokio::time::Instant::now() + ACCEPT_PAUSE);
                    paused = true;
                    let times = failed.take().map_or(0, |(times, _)| times) + 1;
                    failed = Some((times, e));
                }
            },
            () = &mut pause, if paused => paused = false,
            _ = tidy.tick() => {
                if connections.parkings.swap(0, Ordering::Relaxed) > 0 {
                    tokio::task::spawn_blocking(give_back_freed_memory);
                }
                if refused > 0 {
                    tracing::warn!(refused, max_connections = max, "connections refused at the cap: every open one was in a request");
                    refused = 0;
                }
                if let Some((times, error)) = failed.take() {
                    tracing::warn!(%error, times, "accepting connections failed; idle ones were shed");
                }
            },
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drop(stopped);
    let _ = stop.send(Stop::Finish);
    let Some(timeout) = shutdown_timeout else {
        return stop.closed().await;
    };
    if tokio::time::timeout(timeout, stop.closed()).await.is_err() {
        tracing::warn!(
            connections = stop.receiver_count(),
            "shutdown timeout: closing the connections still open, their requests unfinished"
        );
        let _ = stop.send(Stop::Now);
        stop.closed().await;
    }
}

/// What the server tells its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Serving.
    Serve,
    /// Shutting down: finish the request in progress, then close.
    Finish,
    /// The shutdown timeout passed: close now, whatever is in progress.
    Now,
}

/// An accept error that concerns only the connection being accepted.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Hands memory that glibc keeps for reuse back to the system. After a burst of thousands of
/// connections, the buffers their parking freed lie scattered inside the heap, where glibc's
/// ordinary trimming (only at the heap's top) never reaches them.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer of ours and only walks glibc's own free lists,
    // under glibc's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}
