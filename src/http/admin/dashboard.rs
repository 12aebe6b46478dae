//! The live dashboard in the console: per product of the live and upcoming sales its sold,
//! remaining, in-flight and paid units, its outbox and the gate's drift from the database; the
//! buys of every server by outcome; the queues' depths. `static/admin.js` keeps the page current
//! from a stream of server-sent events, one a second. Every stream sends the process's one
//! reading of the second ([`SaleService::overview`](crate::sale::SaleService::overview)), so
//! open dashboards add no reads. A stream lasts as long as its session: it ends when this
//! server learns that the session was ended (at once where the operator signed out, within the
//! revocation sync's second elsewhere), or at the first second after it expired.

use super::{AdminSession, page};
use crate::error::ApiError;
use crate::http::AppState;
use crate::sale::{BuysFrom, Overview};
use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Interval, MissedTickBehavior};

/// The most dashboard streams one server serves at once: each holds a connection and sends
/// an event a second, so a few operators' tabs are welcome and a flood is not.
pub const MAX_STREAMS: usize = 64;

/// How often the stream sends a snapshot, and at the latest sees that its session expired.
const PERIOD: Duration = Duration::from_secs(1);

/// The open dashboard streams of one server, at most [`MAX_STREAMS`]. One per server, not per
/// process, so that servers sharing a process (the tests') do not share it.
#[derive(Clone)]
pub struct Streams {
    /// The places left.
    places: Arc<Semaphore>,
    /// Turns true when the server shuts down: a stream never ends on its own, so each ends
    /// then, with an `ended` event, and its connection can close.
    closing: Arc<watch::Sender<bool>>,
}

impl Default for Streams {
    fn default() -> Self {
        Self::new(MAX_STREAMS)
    }
}

impl Streams {
    fn new(places: usize) -> Self {
        Self {
            places: Arc::new(Semaphore::new(places)),
            closing: Arc::new(watch::channel(false).0),
        }
    }

    /// Ends every open stream, and those opened from now on at once: the server is shutting
    /// down.
    pub fn end_all(&self) {
        self.closing.send_replace(true);
    }

    /// A place among the open streams, or 503 when all are taken. The place is given back
    /// when the permit drops: when the stream ends, with its session or its client.
    fn admit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.places.clone().try_acquire_owned().map_err(|_| {
            ApiError::client(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_streams",
                "too many dashboards are open on this server: close one and reload",
            )
        })
    }
}

/// `GET /admin/dashboard`: the current snapshot, drawn by the server so the page reads without
/// its script, then kept current by it.
#[derive(Template)]
#[template(path = "admin/dashboard.html")]
struct DashboardPage {
    csrf: String,
    snapshot: Arc<Overview>,
}

impl DashboardPage {
    /// Whose buys the page shows, in words.
    fn buys_from(&self) -> String {
        match self.snapshot.buys_from {
            BuysFrom::AllServers => format!("all servers ({})", self.snapshot.servers),
            BuysFrom::ThisServer => "this server".to_owned(),
        }
    }
}

pub(crate) async fn dashboard_page(
    State(state): State<AppState>,
    session: AdminSession,
) -> Result<Response, ApiError> {
    page(
        StatusCode::OK,
        &DashboardPage {
            csrf: session.csrf().to_owned(),
            snapshot: state.sale.overview().await?,
        },
    )
}

/// `GET /admin/dashboard/stream`: an [`Overview`] as JSON in a `snapshot` event every second,
/// the first at once. A reading that fails is sent as an `unavailable` event, and the next
/// second tries again. When the session ends (signed out on any server, or expired), or the
/// server shuts down, an `ended` event is the last.
pub(crate) async fn dashboard_stream(
    State(state): State<AppState>,
    session: AdminSession,
) -> Result<Response, ApiError> {
    let place = state.streams.admit()?;
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let feed = Feed {
        news: state.auth.revoked.news(),
        closing: state.streams.closing.subscribe(),
        state,
        session,
        ticks,
        _place: place,
    };
    let events = stream::unfold(Some(feed), |feed| async move {
        let mut feed = feed?;
        let why = match feed.next_second().await {
            Ok(()) => {
                let event = feed.snapshot().await;
                return Some((Ok::<_, Infallible>(event), Some(feed)));
            }
            Err(Ended::Session) => "the session ended: sign in again",
            Err(Ended::Server) => "the server is shutting down: reload",
        };
        Some((Ok(Event::default().event("ended").data(why)), None))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// One open stream: what it reads each second, and the session it lives as long as.
struct Feed {
    /// Where the snapshot is read, and the ended sessions.
    state: AppState,
    /// The session that opened the stream, asked each time whether it is still on.
    session: AdminSession,
    /// A second apart: a snapshot each, and the session's expiry seen at the latest then.
    ticks: Interval,
    /// Marked when this process learns of an ended session, so that a sign-out ends the
    /// stream then rather than at its next second.
    news: watch::Receiver<()>,
    /// Turns true when the server shuts down (see [`Streams::end_all`]).
    closing: watch::Receiver<bool>,
    /// Its place among the server's open streams, given back when the feed drops.
    _place: OwnedSemaphorePermit,
}

/// Why a stream ends.
enum Ended {
    /// Its session was ended or expired.
    Session,
    /// The server is shutting down.
    Server,
}

impl Feed {
    /// Waits for the next second; an error as soon as the session is over or the server shuts
    /// down instead. Its cost: a clock reading and, only while some session is ended, a
    /// lookup in the ended set, once a second and once for each session ended meanwhile.
    async fn next_second(&mut self) -> Result<(), Ended> {
        loop {
            if *self.closing.borrow_and_update() {
                return Err(Ended::Server);
            }
            tokio::select! {
                _ = self.ticks.tick() => {
                    return if self.session.is_on(&self.state) { Ok(()) } else { Err(Ended::Session) };
                }
                told = self.news.changed() => {
                    if told.is_err() || !self.session.is_on(&self.state) {
                        return Err(Ended::Session);
                    }
                }
                _ = self.closing.changed() => {}
            }
        }
    }

    /// The process's reading of this second as an event.
    async fn snapshot(&self) -> Event {
        match self.state.sale.overview().await {
            Ok(snapshot) => Event::default()
                .event("snapshot")
                .json_data(&*snapshot)
                .unwrap_or_else(|_| Event::default().comment("unreadable")),
            Err(e) => {
                tracing::warn!(error = %e, "reading the dashboard");
                Event::default()
                    .event("unavailable")
                    .data("the sale could not be read")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_beyond_the_cap_are_refused_until_one_ends() {
        let streams = Streams::new(2);
        let first = streams.admit().expect("a free place");
        let _second = streams.admit().expect("a free place");
        let refused = streams.admit().map(drop).unwrap_err().into_response();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(first);
        assert!(streams.admit().is_ok());
    }
}
