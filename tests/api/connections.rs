//! The server loop on raw sockets: idle keep-alive connections are parked and woken without a
//! byte lost, closed ones end, and a stop does not wait for parked ones. A crowded server parks
//! connections between any two requests, again without a byte lost. Clients that stall or idle
//! are cut off at their deadlines, and a flood of stalled connections is shed, oldest first,
//! before it can take the file descriptors the server needs to answer.

use crate::support::processes::embedded_server;
use crate::support::{TestApp, TestDatabase, bare_server as server};
use seckill::server::{PARK_AFTER, RESERVED_FILES, listen};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::timeout;

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n";

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads one `/healthz` answer off `stream`, and returns it.
async fn healthy(stream: &mut TcpStream) -> String {
    healthy_times(stream, 1).await
}

/// Reads `n` `/healthz` answers off `stream`, all `200`, and returns them.
async fn healthy_times(stream: &mut TcpStream, n: usize) -> String {
    let body = b"{\"status\":\"ok\"}";
    let count =
        |bytes: &[u8], what: &[u8]| bytes.windows(what.len()).filter(|w| *w == what).count();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    while count(&answer, body) < n || !answer.ends_with(body) {
        let n = timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("an answer within 5 s")
            .unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    assert_eq!(count(&answer, b"HTTP/1.1 200 OK"), n, "{text}");
    text
}

/// Long enough for the server to have parked an idle connection.
async fn idle() {
    tokio::time::sleep(PARK_AFTER * 5 / 2).await;
}

#[tokio::test]
async fn an_idle_connection_is_parked_and_serves_again() {
    let app = TestApp::spawn().await;
    let mut stream = connect(&app).await;
    for _ in 0..3 {
        stream.write_all(HEALTHZ).await.unwrap();
        healthy(&mut stream).await;
        idle().await;
    }
    // Two requests in one write, after parking.
    stream
        .write_all(&[HEALTHZ, HEALTHZ].concat())
        .await
        .unwrap();
    healthy_times(&mut stream, 2).await;
    app.stop().await;
}

#[tokio::test]
async fn a_request_that_trickles_in_is_not_cut_off() {
    let app = TestApp::spawn().await;
    let mut stream = connect(&app).await;
    for byte in HEALTHZ.chunks(HEALTHZ.len() / 8 + 1) {
        stream.write_all(byte).await.unwrap();
        tokio::time::sleep(PARK_AFTER / 3).await;
    }
    let answer = healthy(&mut stream).await;
    assert!(!answer.contains("connection: close"), "{answer}");
    stream.write_all(HEALTHZ).await.unwrap();
    healthy(&mut stream).await;
    app.stop().await;
}

#[tokio::test]
async fn connections_closed_by_their_clients_end() {
    let app = TestApp::spawn().await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    for round in 0..2 {
        let mut streams = Vec::new();
        for _ in 0..100 {
            let mut stream = connect(&app).await;
            stream.write_all(HEALTHZ).await.unwrap();
            healthy(&mut stream).await;
            streams.push(stream);
        }
        if round == 1 {
            idle().await;
        }
        drop(streams);
    }
    // Background tasks (a worker's consumers, timers) come and go; 200 connections that
    // never ended would stand out.
    let slack = 25;
    let mut alive = metrics.num_alive_tasks();
    for _ in 0..50 {
        if alive <= before + slack {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        alive = metrics.num_alive_tasks();
    }
    assert!(
        alive <= before + slack,
        "{alive} tasks alive, {before} before"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_stop_does_not_wait_for_parked_connections() {
    let app = TestApp::spawn().await;
    let mut parked = connect(&app).await;
    parked.write_all(HEALTHZ).await.unwrap();
    healthy(&mut parked).await;
    let _never_used = connect(&app).await;
    idle().await;
    timeout(Duration::from_secs(5), app.stop())
        .await
        .expect("the server stops within 5 s");
    let mut rest = Vec::new();
    let closed = timeout(Duration::from_secs(5), parked.read_to_end(&mut rest)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the parked connection is closed"
    );
}

/// A crowd connects within the same second: the kernel queues every handshake for `accept`,
/// however far behind the server is, instead of dropping some for the shopper's system to retry
/// a second later. (The listener here never accepts: the queue alone must hold them.)
#[tokio::test]
async fn a_thousand_connections_arriving_at_once_all_get_through() {
    let listener = listen(([127, 0, 0, 1], 0).into()).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut connecting = JoinSet::new();
    for _ in 0..1000 {
        // A dropped handshake is retried after one second at the earliest.
        connecting.spawn(timeout(
            Duration::from_millis(900),
            TcpStream::connect(addr),
        ));
    }
    let mut connected = Vec::new();
    while let Some(attempt) = connecting.join_next().await {
        if let Ok(stream) = attempt.unwrap() {
            connected.push(stream.unwrap());
        }
    }
    let somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap_or_default();
    assert_eq!(
        connected.len(),
        1000,
        "handshakes dropped (the kernel caps the queue at net.core.somaxconn = {})",
        somaxconn.trim()
    );
}

/// A server that is always crowded: it parks every connection as soon as it is between
/// requests.
fn crowded_server() -> String {
    server(|serve| serve.crowd(0))
}

#[tokio::test]
async fn a_crowded_server_parks_between_requests_without_losing_a_byte() {
    let mut stream = TcpStream::connect(crowded_server()).await.unwrap();
    let mut answers = String::new();
    // One after another, then two in one write.
    for _ in 0..3 {
        stream.write_all(HEALTHZ).await.unwrap();
        answers += &healthy(&mut stream).await;
    }
    stream
        .write_all(&[HEALTHZ, HEALTHZ].concat())
        .await
        .unwrap();
    answers += &healthy_times(&mut stream, 2).await;
    // A request in pieces, and one whose body comes after its head.
    for piece in HEALTHZ.chunks(HEALTHZ.len() / 4 + 1) {
        stream.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    answers += &healthy(&mut stream).await;
    let head = b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 11\r\n\r\n";
    stream.write_all(head).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream.write_all(b"hello world").await.unwrap();
    answers += &healthy(&mut stream).await;
    // A whole request and the first half of the next, then the rest.
    let (first, rest) = HEALTHZ.split_at(10);
    stream.write_all(&[HEALTHZ, first].concat()).await.unwrap();
    answers += &healthy(&mut stream).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream.write_all(rest).await.unwrap();
    answers += &healthy(&mut stream).await;
    assert!(!answers.contains("connection: close"), "{answers}");
}

/// A client that asks for the connection to be closed gets its answer, then the close, crowded
/// or not (HTTP/1.0 closes by default).
#[tokio::test]
async fn a_crowded_server_closes_connections_whose_clients_ask_it_to() {
    let addr = crowded_server();
    for request in [
        &b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"[..],
        b"GET /healthz HTTP/1.0\r\n\r\n",
    ] {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut answer = Vec::new();
        timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
            .await
            .expect("closed within 5 s")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.ends_with("{\"status\":\"ok\"}"), "{answer}");
    }
}

/// Many shoppers at once, each asking a few times on its own connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowded_server_answers_every_request_of_a_crowd() {
    let addr = crowded_server();
    let mut shoppers = JoinSet::new();
    for _ in 0..200 {
        let addr = addr.clone();
        shoppers.spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            for _ in 0..5 {
                stream.write_all(HEALTHZ).await.unwrap();
                healthy(&mut stream).await;
            }
        });
    }
    while let Some(shopper) = shoppers.join_next().await {
        shopper.unwrap();
    }
}

/// Waits until the server closes `stream` (an end of stream or a reset), reading and dropping
/// whatever it sends; how long that took from `since`.
async fn closed(stream: &mut TcpStream, since: Instant, within: Duration) -> Duration {
    let mut rest = Vec::new();
    let outcome = timeout(within, stream.read_to_end(&mut rest)).await;
    assert!(outcome.is_ok(), "still open after {within:?}");
    since.elapsed()
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_request_head_that_stalls_halfway_is_closed_at_the_header_deadline() {
    let addr = server(|serve| serve.header_read_timeout(SECOND));
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(&HEALTHZ[..12]).await.unwrap();
    let took = closed(&mut stream, start, 4 * SECOND).await;
    assert!(
        took >= SECOND * 9 / 10,
        "closed after {took:?}, before its deadline"
    );
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_at_the_header_deadline() {
    let addr = server(|serve| serve.header_read_timeout(SECOND));
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let took = closed(&mut stream, start, 4 * SECOND).await;
    assert!(
        took >= SECOND * 9 / 10,
        "closed after {took:?}, before its deadline"
    );
}

/// The first request after a connection was parked gets a header deadline of its own.
#[tokio::test]
async fn a_parked_connection_whose_next_request_stalls_is_closed_at_the_header_deadline() {
    let header_read = 3 * SECOND;
    let addr = server(|serve| serve.header_read_timeout(header_read));
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(HEALTHZ).await.unwrap();
    healthy(&mut stream).await;
    idle().await;
    let start = Instant::now();
    stream.write_all(&HEALTHZ[..12]).await.unwrap();
    let took = closed(&mut stream, start, header_read + 3 * SECOND).await;
    assert!(
        took >= header_read * 9 / 10,
        "closed after {took:?}, before its deadline"
    );
}

#[tokio::test]
async fn a_request_body_that_stops_coming_is_closed() {
    let addr = server(|serve| serve.header_read_timeout(SECOND));
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 11\r\n\r\nhello";
    stream.write_all(head).await.unwrap();
    closed(&mut stream, start, 4 * SECOND).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_deadline() {
    let idle_timeout = 2 * SECOND;
    let addr = server(|serve| {
        serve
            .header_read_timeout(10 * SECOND)
            .idle_timeout(idle_timeout)
    });
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(HEALTHZ).await.unwrap();
    healthy(&mut stream).await;
    let start = Instant::now();
    let took = closed(&mut stream, start, idle_timeout + 3 * SECOND).await;
    assert!(
        took >= idle_timeout * 9 / 10,
        "closed after {took:?}, before its deadline"
    );
}

/// More stalled connections than the cap: the oldest are shed to make room, a request in
/// progress is not, and `/healthz` is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_the_oldest_stalled_connections_are_shed_first() {
    const CAP: usize = 64;
    const STALLED: usize = 100;
    let addr = server(|serve| serve.max_connections(CAP));
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut stalled = Vec::new();
    for i in 0..STALLED {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        // Half of them half a request, half of them nothing; a shed one may be closed already.
        if i % 2 == 0 {
            let _ = stream.write_all(&HEALTHZ[..12]).await;
        }
        stalled.push(stream);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut fresh = TcpStream::connect(&addr).await.unwrap();
    fresh.write_all(HEALTHZ).await.unwrap();
    healthy(&mut fresh).await;
    healthy(&mut slow).await;

    let mut checks = JoinSet::new();
    for (i, mut stream) in stalled.into_iter().enumerate() {
        checks.spawn(async move {
            let mut rest = Vec::new();
            let open = timeout(Duration::from_millis(500), stream.read_to_end(&mut rest))
                .await
                .is_err();
            (i, open)
        });
    }
    let mut open = [false; STALLED];
    while let Some(check) = checks.join_next().await {
        let (i, is_open) = check.unwrap();
        open[i] = is_open;
    }
    let shed = open.iter().position(|&open| open).unwrap_or(STALLED);
    assert!(
        open[shed..].iter().all(|&open| open),
        "only the oldest are shed: {open:?}"
    );
    // The slow request's connection, the fresh one and the stalled ones left fit under the cap.
    assert!(STALLED - shed + 2 <= CAP, "{shed} shed, {open:?}");
    assert!(
        STALLED - shed + 2 >= CAP - 8,
        "{shed} shed, more than needed"
    );
}

/// As deployed on a system whose open-file limit is 1,024 (soft and hard): a client that opens
/// more stalled connections than that does not keep `/healthz` from answering, time after time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_under_a_limit_of_1024_files_answers_through_1100_stalled_connections() {
    // This process holds the 1,100 sockets.
    seckill::server::raise_file_limit().unwrap();
    let db = TestDatabase::fresh().await;
    let (mut child, addr) = embedded_server(&db, Some(1_024)).await;
    let mut stalled = Vec::new();
    for i in 0..1_100 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        if i % 2 == 0 {
            let _ = stream.write_all(&HEALTHZ[..12]).await;
        }
        stalled.push(stream);
    }
    for _ in 0..3 {
        let mut stream = timeout(5 * SECOND, TcpStream::connect(&addr))
            .await
            .expect("connected within 5 s")
            .unwrap();
        stream.write_all(HEALTHZ).await.unwrap();
        healthy(&mut stream).await;
    }
    assert!(child.try_wait().unwrap().is_none(), "the server is running");
    // The server made room by closing stalled connections before it ran out of files.
    let still_open = count_open(stalled).await;
    assert!(
        (1..=1_024 - RESERVED_FILES as usize).contains(&still_open),
        "{still_open} stalled connections still open"
    );
}

/// How many of `streams` the server has not closed.
async fn count_open(streams: Vec<TcpStream>) -> usize {
    let mut checks = JoinSet::new();
    for mut stream in streams {
        checks.spawn(async move {
            let mut rest = Vec::new();
            timeout(Duration::from_millis(500), stream.read_to_end(&mut rest))
                .await
                .is_err()
        });
    }
    checks
        .join_all()
        .await
        .into_iter()
        .filter(|&open| open)
        .count()
}
