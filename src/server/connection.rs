//! One connection from accept to close: served by hyper while it is busy, parked as a bare
//! socket while it idles, and closed when its client stalls or idles past a deadline, or when
//! the server sheds it.

use super::activity::Activity;
use super::heads::HeadEnd;
use super::limits::PARK_AFTER;
use super::table::{Connections, Open};
use super::{App, Ends, Stop};
use axum::body::Body;
use bytes::{Buf, Bytes};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::ServiceExt;
use tower::util::Oneshot;

/// A connection between requests: the socket and any bytes already read from it.
struct Parked {
    stream: TcpStream,
    unread: Bytes,
}

/// Serves one connection until it is over, parked whenever it idles.
pub(super) async fn connection<A: App>(
    stream: TcpStream,
    peer: SocketAddr,
    app: A,
    mut stop: watch::Receiver<Stop>,
    open: Open,
) {
    let (connections, activity) = (open.connections(), &open.activity);
    let limits = connections.limits;
    let Ok(local) = stream.local_addr() else {
        return;
    };
    let ends = Ends { peer, local };
    let mut parked = Parked {
        stream,
        unread: Bytes::new(),
    };
    loop {
        if parked.unread.is_empty() {
            let deadline = activity.park_deadline(limits.header_read, limits.idle);
            tokio::select! {
                first = first_bytes(&parked.stream) => match first {
                    Some(bytes) => parked.unread = bytes,
                    None => return,
                },
                () = tokio::time::sleep_until(deadline.into()) => return,
                () = activity.shed.notified() => return,
                _ = stop.changed() => return,
            }
        }
        match serve_until_idle(parked, ends, &app, &mut stop, connections, activity).await {
            Some(next) => {
                connections.parkings.fetch_add(1, Ordering::Relaxed);
                parked = next;
            }
            None => return,
        }
    }
}

/// The first bytes the client of a parked connection sends; `None` when it closed or the
/// socket failed. Read here rather than by hyper, so a connection takes hyper's buffers only
/// once its client has sent something, not when the socket merely reports itself readable.
async fn first_bytes(stream: &TcpStream) -> Option<Bytes> {
    loop {
        stream.readable().await.ok()?;
        // Not held across the wait, so a waiting connection's task does not carry it.
        let mut buf = [0u8; 1024];
        match stream.try_read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => return Some(Bytes::copy_from_slice(&buf[..n])),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
}

/// Serves requests on `parked` until it has been idle for [`PARK_AFTER`], or until it is
/// between requests while the server is crowded; then hands it back. `None` when the
/// connection is over: closed by the client, broken, stalled past its deadline, shed, or told
/// to stop.
async fn serve_until_idle<A: App>(
    parked: Parked,
    ends: Ends,
    app: &A,
    stop: &mut watch::Receiver<Stop>,
    connections: &Arc<Connections>,
    activity: &Arc<Activity>,
) -> Option<Parked> {
    let service = Serving {
        app: app.clone(),
        ends,
        activity: activity.clone(),
        connections: connections.clone(),
    };
    let io = TokioIo::new(Replay {
        parked,
        activity: activity.clone(),
        connections: connections.clone(),
        refused: false,
        head_end: HeadEnd::default(),
    });
    // Boxed, so a parked connection's task does not carry hyper's state in its own size.
    let mut http = Box::new(connections.http.serve_connection(io, service));
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
                let parts = http.into_parts();
                let replay = parts.io.into_inner();
                // Whatever the head held, the parked or closed connection holds no more.
                connections.head_done(activity);
                let mut parked = replay.parked;
                if replay.refused {
                    // What hyper read of the head is let go of before the answer's wait.
                    drop(parts.read_buf);
                    // Boxed: every connection's task would otherwise carry the refusal's
                    // state in its own size.
                    let refusal = connections.refusal.answer(parked.stream, connections.limits.header_read);
                    Box::pin(refusal).await;
                    return None;
                }
                // Unless parked on purpose, hyper is done because the client closed.
                if done.is_err() || stopping || !(parking || parking_at_once) {
                    return None;
                }
                // Bytes of the next request that hyper read but did not use come first.
                parked.unread = [parts.read_buf, parked.unread].concat().into();
                return Some(parked);
            }
            _ = tick.tick() => {
                // hyper's own deadline covers a request's head; this one also covers a body
                // that stops coming and an answer the client stops reading.
                let stalled = Instant::now().saturating_duration_since(activity.last_active());
                if !activity.handling() && stalled >= connections.limits.header_read {
                    return None;
                }
                let mark = activity.mark();
                if mark == seen && !activity.answering() && !parking && !stopping {
                    // Idle: hyper hands the connection back now. (Had a request's first
                    // bytes sat unfinished for a whole period, hyper answers it first, with
                    // `Connection: close`.)
                    Pin::new(&mut *http).graceful_shutdown();
                    parking = true;
                }
                seen = mark;
            }
            () = activity.shed.notified(), if !stopping => {
                // A half-sent head is the client's loss; anything else ends after its answer.
                if activity.awaiting_head() {
                    return None;
                }
                Pin::new(&mut *http).graceful_shutdown();
                stopping = true;
            }
            told = stop.changed() => {
                // A server that is gone, or whose shutdown timeout passed, waits for nothing.
                if told.is_err() || *stop.borrow() == Stop::Now {
                    return None;
                }
                if !stopping {
                    Pin::new(&mut *http).graceful_shutdown();
                    stopping = true;
                }
            }
        }
    }
}

/// The app as hyper serves it on one connection: each request, with the connection's ends in
/// its extensions and its body tracked, goes to a clone of the app made ready.
struct Serving<A> {
    app: A,
    ends: Ends,
    activity: Arc<Activity>,
    connections: Arc<Connections>,
}

impl<A: App> hyper::service::Service<Request<Incoming>> for Serving<A> {
    type Response = Response<A::Answer>;
    type Error = Infallible;
    // Boxed: hyper wants a future it may move.
    type Future = Pin<Box<Answering<A>>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        let activity = &self.activity;
        request.extensions_mut().insert(self.ends);
        let body_pending = !request.body().is_end_stream();
        let number = activity.request_begun(body_pending);
        self.connections.head_done(activity);
        let request = request.map(|body| {
            if body_pending {
                Body::new(Tracked {
                    body,
                    activity: activity.clone(),
                    number,
                })
            } else {
                Body::new(body)
            }
        });
        Box::pin(Answering {
            answer: self.app.clone().oneshot(request),
            activity: Some(activity.clone()),
        })
    }
}

pin_project_lite::pin_project! {
    /// A request's answer from the app, which tells the connection once it is ready.
    struct Answering<A: App> {
        #[pin]
        answer: Oneshot<A, Request<Body>>,
        activity: Option<Arc<Activity>>,
    }
}

impl<A: App> Future for Answering<A> {
    type Output = Result<Response<A::Answer>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = std::task::ready!(this.answer.poll(cx));
        if let Some(activity) = this.activity.take() {
            activity.request_answered();
        }
        Poll::Ready(answer)
    }
}

/// A request body that tells the connection when the client has sent all of it: until then
/// the request waits on the client, and a client that stops sending is cut off.
struct Tracked {
    body: Incoming,
    activity: Arc<Activity>,
    /// The request's number on its connection.
    number: u64,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) || self.body.is_end_stream() {
            self.activity.body_done(self.number);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.body.is_end_stream() {
            self.activity.body_abandoned();
        }
        self.activity.body_done(self.number);
    }
}

/// A parked connection's socket that first replays the bytes read before it was parked,
/// records what moves through it, and counts the bytes of request heads.
struct Replay {
    parked: Parked,
    activity: Arc<Activity>,
    connections: Arc<Connections>,
    /// A head grew past the bound: hyper was told the socket failed, and the connection is
    /// answered with the refusal.
    refused: bool,
    /// Where the head arriving ends, so that a body read with it is not counted as head.
    head_end: HeadEnd,
}

impl AsyncRead for Replay {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let unread = &mut this.parked.unread;
        let read = if unread.is_empty() {
            Pin::new(&mut this.parked.stream).poll_read(cx, buf)
        } else {
            let n = unread.len().min(buf.remaining());
            buf.put_slice(&unread[..n]);
            unread.advance(n);
            Poll::Ready(Ok(()))
        };
        let n = buf.filled().len() - before;
        if n == 0 {
            return read;
        }
        this.activity.bytes_arrived(n);
        // Bytes read while the application has no request are the next head's, up to its
        // blank line; once its request begins, nothing more is counted until it is answered.
        if !this.activity.answering() {
            let fresh = &buf.filled()[before..];
            let n = this.head_end.head_bytes(this.activity.begun(), fresh);
            if n == 0 {
                return read;
            }
            let Some((head, exact)) = this.connections.head_arrived(&this.activity, n) else {
                return Poll::Ready(Err(io::Error::other("the heads' budget is spent")));
            };
            if exact && head > this.connections.limits.max_head {
                this.refused = true;
                return Poll::Ready(Err(io::Error::other("request head too large")));
            }
        }
        read
    }
}

impl AsyncWrite for Replay {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let attempt = Pin::new(&mut self.parked.stream).poll_write(cx, buf);
        self.activity.wrote(attempt)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let attempt = Pin::new(&mut self.parked.stream).poll_write_vectored(cx, bufs);
        self.activity.wrote(attempt)
    }

    fn is_write_vectored(&self) -> bool {
        self.parked.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.parked.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.parked.stream).poll_shutdown(cx)
    }
}
