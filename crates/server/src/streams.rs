//! Resumable streams. Each streaming response is produced by a task of its
//! own that owns the engine's request streams and appends SSE frames to a
//! buffer; HTTP connections only read that buffer. A connection that drops
//! detaches; `GET /v1/streams/{id}` with `Last-Event-ID` attaches again and
//! replays what was missed. When no connection has been attached for the
//! grace period, the producer drops the engine streams (cancelling the
//! sequences) and the buffer is forgotten.

use crate::respond::{Frame, StreamEncoder};
use axum::response::sse::Event as SseEvent;
use futures_util::stream::{self, Stream, StreamExt};
use hasten_engine::{Event, RequestStream};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Counters the replay buffers keep for `/metrics`.
#[derive(Debug, Default)]
pub struct StreamCounters {
    /// Streams cancelled because no client was attached for the grace period.
    pub abandoned: AtomicU64,
    /// Successful reattachments.
    pub resumed: AtomicU64,
    /// Streams ended by the per-request timeout.
    pub timed_out: AtomicU64,
}

struct Entry {
    frames: Mutex<Vec<Frame>>,
    /// Frames buffered so far, and whether the stream has ended.
    progress: watch::Sender<(usize, bool)>,
    /// Connections reading this stream now.
    attached: watch::Sender<usize>,
}

impl Entry {
    fn push(&self, frames: Vec<Frame>) {
        if frames.is_empty() {
            return;
        }
        let len = {
            let mut f = self.frames.lock().unwrap_or_else(|p| p.into_inner());
            f.extend(frames);
            f.len()
        };
        self.progress.send_modify(|p| p.0 = len);
    }

    fn end(&self) {
        self.progress.send_modify(|p| p.1 = true);
    }
}

/// Decrements the attached count when a connection's body is dropped.
struct Attached(Arc<Entry>);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.attached.send_modify(|n| *n -= 1);
    }
}

/// All live streams by request id.
pub struct ReplayBuffers {
    streams: Mutex<HashMap<String, Arc<Entry>>>,
    grace: Duration,
    pub counters: StreamCounters,
}

impl ReplayBuffers {
    pub fn new(grace: Duration) -> Arc<ReplayBuffers> {
        Arc::new(ReplayBuffers {
            streams: Mutex::new(HashMap::new()),
            grace,
            counters: StreamCounters::default(),
        })
    }

    pub fn contains(&self, id: &str) -> bool {
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(id)
    }

    pub fn live(&self) -> usize {
        self.streams.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Starts the producer for `streams` (choice `i` is `streams[i]`) and
    /// returns the first connection's SSE body. `first` frames (queue
    /// comments) go out before the encoder's own.
    pub fn start(
        self: &Arc<Self>,
        id: String,
        streams: Vec<RequestStream>,
        mut enc: StreamEncoder,
        first: Vec<Frame>,
        timeout: Option<Duration>,
    ) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
        let entry = Arc::new(Entry {
            frames: Mutex::new(Vec::new()),
            progress: watch::channel((0, false)).0,
            attached: watch::channel(1).0,
        });
        entry.push(first);
        entry.push(enc.start());
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), entry.clone());
        let replays = self.clone();
        let e2 = entry.clone();
        tokio::spawn(async move {
            let mut events = stream::select_all(
                streams
                    .into_iter()
                    .enumerate()
                    .map(|(i, s)| Box::pin(engine_events(s).map(move |ev| (i, ev)))),
            );
            let abandoned = abandoned(e2.attached.subscribe(), replays.grace);
            tokio::pin!(abandoned);
            let deadline = async {
                match timeout {
                    Some(t) => tokio::time::sleep(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(deadline);
            let mut gone = false;
            while !enc.is_done() {
                tokio::select! {
                    ev = events.next() => match ev {
                        Some((i, ev)) => e2.push(enc.event(i, ev)),
                        None => break,
                    },
                    () = &mut abandoned => {
                        replays.counters.abandoned.fetch_add(1, Ordering::Relaxed);
                        gone = true;
                        break;
                    }
                    () = &mut deadline => {
                        replays.counters.timed_out.fetch_add(1, Ordering::Relaxed);
                        let err = crate::error::Error::Timeout(timeout.unwrap_or_default());
                        e2.push(enc.abort(&err));
                    }
                }
            }
            // Dropping the engine streams cancels whatever is unfinished.
            drop(events);
            e2.end();
            // Keep the finished buffer for late reattachments, then forget it.
            if !gone {
                abandoned.await;
            }
            replays
                .streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        });
        body(entry.clone(), 0, Attached(entry))
    }

    /// Reattaches to stream `id`, replaying the frames after `last_event_id`.
    pub fn resume(
        &self,
        id: &str,
        last_event_id: Option<usize>,
    ) -> Option<impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static> {
        let entry = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)?
            .clone();
        entry.attached.send_modify(|n| *n += 1);
        self.counters.resumed.fetch_add(1, Ordering::Relaxed);
        let from = last_event_id.map_or(0, |i| i + 1);
        Some(body(entry.clone(), from, Attached(entry)))
    }
}

/// An engine request's events as a stream (ends when the engine drops it).
fn engine_events(s: RequestStream) -> impl Stream<Item = Event> + Send {
    stream::unfold(s, |mut s| async move { s.recv().await.map(|e| (e, s)) })
}

/// Resolves once no connection has been attached for `grace`.
async fn abandoned(mut attached: watch::Receiver<usize>, grace: Duration) {
    loop {
        if attached.wait_for(|&n| n == 0).await.is_err() {
            return;
        }
        if grace.is_zero() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(grace) => return,
            r = attached.wait_for(|&n| n > 0) => if r.is_err() { return },
        }
    }
}

/// The frames of `entry` from index `from` on, as SSE events whose `id` is
/// the frame index (comments carry none).
fn body(
    entry: Arc<Entry>,
    from: usize,
    guard: Attached,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
    let progress = entry.progress.subscribe();
    stream::unfold(
        (entry, from, progress, guard),
        |(entry, mut next, mut progress, guard)| async move {
            loop {
                let ended = progress.borrow_and_update().1;
                let frame = entry
                    .frames
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(next)
                    .cloned();
                if let Some(f) = frame {
                    let ev = match f {
                        Frame::Comment(c) => SseEvent::default().comment(c),
                        Frame::Data(d) => SseEvent::default().id(next.to_string()).data(d),
                    };
                    next += 1;
                    return Some((Ok(ev), (entry, next, progress, guard)));
                }
                if ended || progress.changed().await.is_err() {
                    return None;
                }
            }
        },
    )
}
