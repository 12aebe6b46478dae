//! What request heads may hold: each head at most [`MAX_HEAD_BYTES`], refused past it with the
//! application's own answer, and all the heads still arriving within [`HEAD_BUDGET`] together.

use axum::body::Body;
use hyper::Response;
use std::io;
use std::time::Duration;
use tokio::net::TcpStream;

/// The most bytes a request's head (request line, headers and the blank line) may have. A
/// client that sends more is answered `431` and closed; what it sent is never held beyond this.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// The most memory the heads still arriving on all connections together may hold. Past three
/// quarters of it, the connections whose heads have been arriving the longest are closed until
/// half is left; a head that would take more than all of it, while those close, closes its own
/// connection. A head whose client has stalled costs its memory until the header deadline
/// otherwise, and enough stalled heads would take the server's memory; a shopper's head arrives
/// whole at once, so it is not among the oldest.
pub const HEAD_BUDGET: usize = 16 << 20;

/// What a connection holds for a head that is arriving, counted against [`HEAD_BUDGET`] on top
/// of the head's own bytes: hyper's read and write buffers.
pub(super) const HEAD_OVERHEAD: usize = 16 * 1024;

/// How long a connection refused for its head's size is drained before it is closed: its
/// client is most likely still sending, and a socket closed with bytes unread is reset, which
/// could destroy the answer before the client reads it.
const LINGER: Duration = Duration::from_secs(2);

/// The bytes of the answer to a head over [`MAX_HEAD_BYTES`], rendered once when the server
/// starts.
#[derive(Clone, Debug)]
pub(super) struct Refusal {
    /// The status line and headers, up to the `date` header written with each answer.
    head: Vec<u8>,
    /// The body, after the blank line.
    body: Vec<u8>,
}

impl Refusal {
    /// `431 Request Header Fields Too Large` and no body: the answer when the application
    /// gives none of its own.
    pub fn plain() -> Self {
        let response = Response::builder()
            .status(hyper::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
            .body(Body::empty())
            .expect("a valid status");
        Self::render_head(&response, Vec::new())
    }

    /// `response` as written on the wire, its body read up to `limit` bytes.
    pub async fn render(response: Response<Body>, limit: usize) -> Self {
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, limit)
            .await
            .map(Vec::from)
            .unwrap_or_default();
        Self::render_head(&Response::from_parts(parts, ()), body)
    }

    fn render_head<B>(response: &Response<B>, body: Vec<u8>) -> Self {
        let status = response.status();
        let mut head = format!(
            "HTTP/1.1 {} {}\r\n",
            status.as_str(),
            status.canonical_reason().unwrap_or("")
        )
        .into_bytes();
        for (name, value) in response.headers() {
            if name == hyper::header::CONTENT_LENGTH || name == hyper::header::CONNECTION {
                continue;
            }
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
        head.extend_from_slice(b"connection: close\r\n");
        Self { head, body }
    }

    /// Writes the answer on `stream` within `deadline`, then drains what the client still
    /// sends for at most [`LINGER`] before the stream is dropped.
    pub async fn answer(&self, stream: TcpStream, deadline: Duration) {
        let date = chrono::Utc::now().format("date: %a, %d %b %Y %H:%M:%S GMT\r\n\r\n");
        let answer = [&self.head[..], date.to_string().as_bytes(), &self.body].concat();
        let written = tokio::time::timeout(deadline, write_all(&stream, &answer)).await;
        if !matches!(written, Ok(Ok(()))) {
            return;
        }
        let Ok(stream) = stream.into_std() else {
            return;
        };
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let Ok(stream) = TcpStream::from_std(stream) else {
            return;
        };
        let _ = tokio::time::timeout(LINGER, drain(&stream)).await;
    }
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads and drops what the client sends until it closes.
async fn drain(stream: &TcpStream) -> io::Result<()> {
    let mut sink = [0u8; 4096];
    loop {
        stream.readable().await?;
        match stream.try_read(&mut sink) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}
