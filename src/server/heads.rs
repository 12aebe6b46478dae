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

/// Where the head arriving on a connection ends: the bytes read up to its blank line are the
/// head's, those after it the body's (or the next request's), which are not the head's to
/// count. A head may end its lines with CRLF or a bare LF, as hyper reads them.
#[derive(Debug, Default)]
pub(super) struct HeadEnd {
    /// The number of the request begun last when this head's first bytes came: a new number
    /// means that head was taken, and the bytes now are another's.
    after_request: u64,
    /// The blank line has been read.
    ended: bool,
    /// The last two bytes read before the ones now looked at.
    last: [u8; 2],
}

impl HeadEnd {
    /// How many of `bytes`, read after request number `begun` began, belong to a head: all of
    /// them until its blank line, up to that line's end with it, none after.
    pub fn head_bytes(&mut self, begun: u64, bytes: &[u8]) -> usize {
        if begun != self.after_request {
            *self = Self {
                after_request: begun,
                ..Self::default()
            };
        }
        if self.ended {
            return 0;
        }
        let before = |i: usize, back: usize| {
            if i >= back {
                bytes[i - back]
            } else {
                self.last[2 + i - back]
            }
        };
        for i in memchr::memchr_iter(b'\n', bytes) {
            if before(i, 1) == b'\n' || (before(i, 1) == b'\r' && before(i, 2) == b'\n') {
                self.ended = true;
                return i + 1;
            }
        }
        self.last = match bytes {
            [.., a, b] => [*a, *b],
            [b] => [self.last[1], *b],
            [] => self.last,
        };
        bytes.len()
    }
}

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

#[cfg(test)]
mod tests {
    use super::HeadEnd;

    #[test]
    fn a_head_ends_at_its_blank_line_however_its_bytes_are_split() {
        let request = b"POST /x HTTP/1.1\r\nHost: a\r\n\r\nbody bytes";
        let head = request.len() - b"body bytes".len();
        for split in 0..request.len() {
            let mut end = HeadEnd::default();
            let (first, second) = request.split_at(split);
            let counted = end.head_bytes(0, first) + end.head_bytes(0, second);
            assert_eq!(counted, head, "split at {split}");
            assert_eq!(end.head_bytes(0, b"more body"), 0);
        }
        let mut bare = HeadEnd::default();
        assert_eq!(bare.head_bytes(0, b"GET / HTTP/1.1\nHost: a\n\nrest"), 24);
    }

    #[test]
    fn the_next_request_counts_anew_and_lines_are_not_blank_by_a_lone_return() {
        let mut end = HeadEnd::default();
        assert_eq!(end.head_bytes(0, b"GET / HTTP/1.1\r\n\r\n"), 18);
        assert_eq!(end.head_bytes(0, b"GET /next"), 0, "the same request's");
        assert_eq!(end.head_bytes(1, b"GET /next"), 9, "after it began");
        assert_eq!(end.head_bytes(1, b" HTTP/1.1\r\nX: \r\r\n"), 17);
        assert!(!end.ended, "a line holding a return is not blank");
    }
}
