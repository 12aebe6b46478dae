//! TCP proxies a test puts between a server and what it talks to, to cut the link: the
//! database refusing connections, the payment gateway unreachable.

use super::app::TestApp;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy between the processes and a server (the database): cut, it closes its
/// listener, so new connections are refused, and drops every connection it carries.
pub struct Proxy {
    /// The local port the proxy listens on.
    pub port: u16,
    /// Whether it is open; its task listens for changes.
    open: watch::Sender<bool>,
}

impl Proxy {
    /// A proxy in front of the server at `url`, and `url` rewritten to go through it.
    pub async fn in_front_of(url: &str) -> (Self, String) {
        let mut through = reqwest::Url::parse(url).unwrap();
        let target = format!(
            "{}:{}",
            through.host_str().unwrap(),
            through.port().unwrap()
        );
        let proxy = Self::start(target.parse().unwrap()).await;
        through.set_port(Some(proxy.port)).unwrap();
        (proxy, through.to_string())
    }

    /// A proxy on a free local port to `target`, open.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (open, mut opened) = watch::channel(true);
        let cuts = opened.clone();
        tokio::spawn(async move {
            let mut listener = Some(listener);
            loop {
                let Some(accepting) = &listener else {
                    if opened.wait_for(|open| *open).await.is_err() {
                        return;
                    }
                    listener = Some(TcpListener::bind(("127.0.0.1", port)).await.unwrap());
                    continue;
                };
                tokio::select! {
                    accepted = accepting.accept() => {
                        let Ok((mut inbound, _)) = accepted else { continue };
                        let mut cut = cuts.clone();
                        tokio::spawn(async move {
                            let Ok(mut outbound) = TcpStream::connect(target).await else {
                                return;
                            };
                            tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                                _ = cut.wait_for(|open| !open) => {}
                            }
                        });
                    }
                    closed = opened.wait_for(|open| !open) => {
                        if closed.is_err() {
                            return;
                        }
                        listener = None;
                    }
                }
            }
        });
        Self { port, open }
    }

    /// Refuses new connections and drops the open ones.
    pub fn cut(&self) {
        self.open.send_replace(false);
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.open.send_replace(true);
    }
}

/// A TCP proxy in front of a test server, standing for the network between the shop and its
/// payment gateway: switched off, it drops every connection, those already open too.
pub struct Switch {
    /// The URL the shop and the gateway are given for each other.
    pub url: String,
    /// The test server it forwards to, once started.
    target: Arc<OnceLock<SocketAddr>>,
    /// Whether it forwards; its task listens for changes.
    on: watch::Sender<bool>,
}

impl Switch {
    /// A switch on a free local port, on, forwarding nowhere yet.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let target = Arc::new(OnceLock::<SocketAddr>::new());
        let (on, _) = watch::channel(true);
        let (forward_to, switched) = (target.clone(), on.subscribe());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut switched = switched.clone();
                let Some(&target) = forward_to.get().filter(|_| *switched.borrow()) else {
                    continue;
                };
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = switched.wait_for(|on| !on) => {}
                    }
                });
            }
        });
        Self { url, target, on }
    }

    /// Forwards to `app` from now on.
    pub fn forward_to(&self, app: &TestApp) {
        let addr = app.base.trim_start_matches("http://").parse().unwrap();
        self.target.set(addr).unwrap();
    }

    /// Switches it on or off.
    pub fn set(&self, on: bool) {
        self.on.send_replace(on);
    }
}
