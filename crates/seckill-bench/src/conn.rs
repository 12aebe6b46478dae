//! One shopper-slot's HTTP/1.1 keep-alive connection, made again after any failure.
//!
//! The crowd does not use the pooled client the set-up uses: the load generator shares the
//! machine's cores with the server it measures, and every microsecond it spends per request
//! (pool checkout, URL parsing, header maps) is taken from the server. A bare hyper connection
//! per slot, like `wrk` keeps one socket per connection, costs the least.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long one request may take before it counts as a timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the crowd goes: the server's address and the path prefix of its routes.
#[derive(Debug, Clone)]
pub struct Target {
    /// `host:port`, also sent as the `Host` header.
    authority: HeaderValue,
    /// What `base` had after the authority, e.g. `/shop` (often empty).
    prefix: String,
}

impl Target {
    /// The target of a base URL such as `http://127.0.0.1:8080`. Plain HTTP only: the bench
    /// measures a server, not a TLS terminator in front of it.
    pub fn parse(base: &str) -> anyhow::Result<Self> {
        let uri: Uri = base.parse()?;
        anyhow::ensure!(
            uri.scheme_str() == Some("http"),
            "{base}: seckill bench drives plain http:// URLs"
        );
        let host = uri
            .host()
            .ok_or_else(|| anyhow::anyhow!("{base}: no host"))?;
        let authority = format!("{host}:{}", uri.port_u16().unwrap_or(80));
        Ok(Self {
            authority: HeaderValue::from_str(&authority)?,
            prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// The path prefix of the server's routes (often empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// An answer: its status, the body, and how long the server asked to wait before trying again
/// (`Retry-After`, in seconds).
#[derive(Debug)]
pub struct Received {
    pub status: StatusCode,
    pub body: Bytes,
    pub retry_after: Option<Duration>,
}

/// What a request carries besides its method and path.
pub enum Payload<'a> {
    /// Nothing: a plain GET.
    Nothing,
    /// A shopper's request: their `Authorization` header and a JSON body (which may be empty).
    Shopper(&'a HeaderValue, Bytes),
    /// A browser's form post (`application/x-www-form-urlencoded`), as to the sandbox payment
    /// gateway's checkout page.
    Form(Bytes),
}

/// Why a request got no answer.
#[derive(Debug)]
pub enum Failure {
    Timeout,
    Connection,
}

/// A connection that is (re)opened on demand.
pub struct Connection {
    target: Target,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Connection {
    /// A connection to `target`, opened with the first request.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            sender: None,
        }
    }

    /// `method path` with `payload`.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        payload: Payload<'_>,
    ) -> Result<Received, Failure> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.target.prefix))
            .header(HOST, self.target.authority.clone());
        let body = match payload {
            Payload::Nothing => Bytes::new(),
            Payload::Shopper(token, json) => {
                request = request
                    .header(AUTHORIZATION, token.clone())
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                json
            }
            Payload::Form(form) => {
                request = request.header(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/x-www-form-urlencoded"),
                );
                form
            }
        };
        let request = request
            .body(Full::new(body))
            .map_err(|_| Failure::Connection)?;
        match tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(request)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(())) => {
                self.sender = None;
                Err(Failure::Connection)
            }
            Err(_) => {
                self.sender = None;
                Err(Failure::Timeout)
            }
        }
    }

    async fn exchange(&mut self, request: Request<Full<Bytes>>) -> Result<Received, ()> {
        let sender = match &mut self.sender {
            Some(sender) if !sender.is_closed() => sender,
            _ => self.sender.insert(self.open().await?),
        };
        sender.ready().await.map_err(drop)?;
        let response = sender.send_request(request).await.map_err(drop)?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|seconds| seconds.to_str().ok()?.parse().ok())
            .map(Duration::from_secs);
        let body = response.into_body().collect().await.map_err(drop)?;
        Ok(Received {
            status,
            body: body.to_bytes(),
            retry_after,
        })
    }

    async fn open(&self) -> Result<SendRequest<Full<Bytes>>, ()> {
        let address = self.target.authority.to_str().map_err(drop)?;
        let stream = TcpStream::connect(address).await.map_err(drop)?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await.map_err(drop)?;
        tokio::spawn(connection);
        Ok(sender)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_becomes_an_address_and_a_prefix() {
        let target = Target::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(target.authority, "127.0.0.1:8080");
        assert_eq!(target.prefix, "");
        let target = Target::parse("http://shop.example/seckill/").unwrap();
        assert_eq!(target.authority, "shop.example:80");
        assert_eq!(target.prefix, "/seckill");
        assert!(Target::parse("https://shop.example").is_err());
        assert!(Target::parse("not a url").is_err());
    }
}
