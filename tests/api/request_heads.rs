//! Request heads on raw sockets: a head over the bound is refused once the bound's bytes are
//! read, in the API's error shape with the security headers, and the server lives on; a
//! thousand clients that each send a long head and stall leave the server's memory as it was,
//! near enough; and past the budget of all heads arriving, the heads arriving the longest are
//! closed first.

use crate::support::processes::embedded_server;
use crate::support::{TestApp, TestDatabase, bare_server};
use seckill::server::MAX_HEAD_BYTES;
use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::timeout;

/// The head a hostile client sent in the issue: 390 KB of header, never finished.
const LONG_HEAD: usize = 390_000;

/// The start of a head whose one header goes on and on, `len` bytes in all.
fn endless_head(len: usize) -> Vec<u8> {
    let mut head = b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Pad: ".to_vec();
    head.resize(len, b'a');
    head
}

/// A whole `/healthz` request whose head has exactly `len` bytes.
fn head_of(len: usize) -> Vec<u8> {
    let mut head = endless_head(len - 4);
    head.extend_from_slice(b"\r\n\r\n");
    head
}

async fn connect(addr: &str) -> TcpStream {
    TcpStream::connect(addr.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads one answer off `stream`: its head (lowercase) and its body, by its `content-length`.
async fn answer(stream: &mut TcpStream) -> (String, String) {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .map_or(0, |n| n.trim().parse().unwrap());
            if bytes.len() >= end + 4 + length {
                let body = String::from_utf8_lossy(&bytes[end + 4..end + 4 + length]);
                return (head, body.into_owned());
            }
        }
        let n = timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("an answer within 5 s")
            .expect("the answer, not a reset");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// `stream`'s answer is the refusal of a head over the bound: `431` in the API's error shape,
/// with the security headers, and the connection closed.
async fn assert_refused(stream: &mut TcpStream) {
    let (head, body) = answer(stream).await;
    assert!(head.starts_with("http/1.1 431 "), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(
        head.contains("\r\ncontent-type: application/json"),
        "{head}"
    );
    assert!(
        head.contains("\r\nx-content-type-options: nosniff"),
        "{head}"
    );
    assert!(head.contains("\r\ncontent-security-policy: "), "{head}");
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["error"]["code"], "head_too_large", "{body}");
}

/// `/healthz` on a fresh connection answers `200`.
async fn assert_alive(addr: &str) {
    let mut stream = connect(addr).await;
    stream.write_all(&head_of(100)).await.unwrap();
    let (head, _) = answer(&mut stream).await;
    assert!(head.starts_with("http/1.1 200 "), "{head}");
}

#[tokio::test]
async fn a_long_head_that_stalls_is_refused_in_the_api_shape_and_the_server_lives_on() {
    let app = TestApp::spawn().await;
    let (reader, mut writer) = connect(&app.base).await.into_split();
    // The client sends its 390 KB and stalls, still connected.
    let sender = tokio::spawn(async move {
        let _ = writer.write_all(&endless_head(LONG_HEAD)).await;
        writer
    });
    let mut stream = reader.reunite(sender.await.unwrap()).unwrap();
    assert_refused(&mut stream).await;
    assert_alive(&app.base).await;
    app.stop().await;
}

#[tokio::test]
async fn a_head_at_the_bound_is_served_and_one_byte_more_is_refused_without_waiting() {
    let app = TestApp::spawn().await;
    let mut stream = connect(&app.base).await;
    stream.write_all(&head_of(MAX_HEAD_BYTES)).await.unwrap();
    let (head, _) = answer(&mut stream).await;
    assert!(head.starts_with("http/1.1 200 "), "{head}");
    // One byte over, and no more coming: the refusal does not wait for the header deadline.
    let mut stream = connect(&app.base).await;
    stream
        .write_all(&endless_head(MAX_HEAD_BYTES + 1))
        .await
        .unwrap();
    assert_refused(&mut stream).await;
    app.stop().await;
}

#[tokio::test]
async fn a_body_sent_with_its_head_is_not_counted_as_head() {
    let app = TestApp::spawn().await;
    // A head of 20 KiB and a body of 16 KiB in one write: more than the bound together, while
    // the head alone is within it.
    let body = format!(
        r#"{{"username":"nobody","password":"{}"}}"#,
        "p".repeat(16_000)
    );
    let mut head = format!(
        "POST /api/v1/sessions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nX-Pad: ",
        body.len()
    )
    .into_bytes();
    head.resize(20 * 1024 - 4, b'a');
    head.extend_from_slice(b"\r\n\r\n");
    let mut stream = connect(&app.base).await;
    stream
        .write_all(&[head, body.into_bytes()].concat())
        .await
        .unwrap();
    let (first, _) = answer(&mut stream).await;
    assert!(
        first.starts_with("http/1.1 401 "),
        "the sign-in's own answer: {first}"
    );
    // The same connection takes the next head, counted from its own start.
    stream.write_all(&head_of(MAX_HEAD_BYTES)).await.unwrap();
    let (second, _) = answer(&mut stream).await;
    assert!(second.starts_with("http/1.1 200 "), "{second}");
    app.stop().await;
}

#[tokio::test]
async fn a_request_line_too_long_is_refused_in_the_api_shape() {
    let app = TestApp::spawn().await;
    let (reader, mut writer) = connect(&app.base).await.into_split();
    let mut request = b"GET /".to_vec();
    request.resize(70_000, b'a');
    request.extend_from_slice(b" HTTP/1.1\r\nHost: test\r\n\r\n");
    let sender = tokio::spawn(async move {
        let _ = writer.write_all(&request).await;
        writer
    });
    let mut stream = reader.reunite(sender.await.unwrap()).unwrap();
    assert_refused(&mut stream).await;
    app.stop().await;
}

/// The resident memory of process `pid` now, and its peak, in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|line| line.starts_with(name)).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The most a thousand long heads may add to the server's memory at its peak.
const THOUSAND_HEADS_GROWTH: u64 = 32 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_long_heads_that_stall_leave_the_server_within_its_bound() {
    // This process holds the thousand sockets; the server raises its own limit as it starts.
    seckill::server::raise_file_limit().unwrap();
    let db = TestDatabase::fresh().await;
    let (child, addr) = embedded_server(&db, None).await;
    let pid = child.id().unwrap();
    assert_alive(&addr).await;
    let (before, _) = memory(pid);
    let head = endless_head(LONG_HEAD);
    let mut clients = JoinSet::new();
    for _ in 0..1_000 {
        let (addr, head) = (addr.clone(), head.clone());
        clients.spawn(async move {
            let mut stream = connect(&addr).await;
            let _ = stream.write_all(&head).await;
            // Stalled: connected, sending nothing more.
            stream
        });
    }
    let stalled = clients.join_all().await;
    assert_alive(&addr).await;
    let (_, peak) = memory(pid);
    let growth = peak.saturating_sub(before);
    assert!(
        growth < THOUSAND_HEADS_GROWTH,
        "the server grew by {} MiB",
        growth >> 20
    );
    drop(stalled);
}

#[tokio::test]
async fn past_the_budget_of_heads_the_heads_arriving_the_longest_are_closed_first() {
    const HEADS: usize = 12;
    // Room for a few 20 KB heads with what hyper holds for each.
    let addr = bare_server(|serve| serve.head_budget(200 * 1024));
    let mut stalled = Vec::new();
    for _ in 0..HEADS {
        let mut stream = connect(&addr).await;
        stream.write_all(&endless_head(20_000)).await.unwrap();
        // Each head has begun before the next: the order the server sheds them in.
        tokio::task::yield_now().await;
        assert_alive(&addr).await;
        stalled.push(stream);
    }
    let mut open = Vec::new();
    for mut stream in stalled {
        let mut rest = Vec::new();
        let closed = timeout(Duration::from_millis(300), stream.read_to_end(&mut rest))
            .await
            .is_ok();
        open.push(!closed);
    }
    let first_open = open.iter().position(|&open| open).unwrap_or(HEADS);
    assert!(first_open > 0, "none was shed: {open:?}");
    assert!(
        open[first_open..].iter().all(|&open| open),
        "only the oldest are shed: {open:?}"
    );
    // Shedding stops at half the budget, which holds two of these heads.
    assert!(
        HEADS - first_open >= 2,
        "more were shed than needed: {open:?}"
    );
}
