//! hasten-engine: serves many requests at once over one model.
//!
//! [`Engine::start`] spawns the engine thread that owns the model's KV
//! cache and runs [`core`]'s step in a loop; async (or plain) code talks to
//! it through channels: [`Engine::submit`] a validated [`Request`] and read
//! its [`Event`]s from the returned [`RequestStream`]. Dropping the stream
//! cancels the request; its KV blocks are freed at the start of the next
//! step.
//!
//! Modules: [`blocks`] (the KV block pool and prefix cache), [`core`] (the
//! scheduler and step), [`cost`] (step-time model that sizes prefill chunks
//! for the ITL target and estimates queue waits), [`metrics`], [`request`].

pub mod blocks;
pub mod constraint;
mod core;
pub mod cost;
pub mod disk;
pub mod draft;
pub mod error;
mod forecast;
pub mod metrics;
pub mod request;

pub use error::{Error, Result};
pub use metrics::Metrics;
pub use request::{
    Event, Finish, FinishReason, Limits, Request, RequestSpec, Speculate, Timing, TokenEvent,
    TokenLogprobs,
};

use hasten_kernels::attention::KvType;
use hasten_kernels::threads::Threads;
use hasten_model::llama::Model;
use hasten_model::tokenizer::Tokenizer;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// How the engine is sized and steered.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// KV cache capacity in tokens (rounded up to whole blocks).
    pub kv_tokens: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Sequences in one step at most.
    pub max_running: usize,
    /// Tokens in one step at most (decodes plus prompt chunks).
    pub max_step_tokens: usize,
    /// Steps with decoding streams are sized to take about this long.
    pub itl_target: Duration,
    /// Smallest prompt chunk while streams decode (keeps prefill moving).
    pub min_prefill_chunk: usize,
    /// Requests allowed to wait; more are refused with a retry estimate.
    pub max_waiting: usize,
    pub prefix_cache: bool,
    pub threads: Threads,
    /// Compute grammar masks on a thread of their own beside the forward
    /// pass (by default when the machine has a core the kernel threads do
    /// not use; on a full machine the thread would slow the pass more than
    /// the masks cost, so they are computed before it).
    pub mask_thread: bool,
    /// Speculative decoding: up to this many drafted tokens verified per
    /// decode step (0: off).
    pub max_draft: usize,
    /// Prompt lookup, the drafter without a second model.
    pub drafter: draft::NgramDrafter,
    /// A small model with the target's vocabulary that drafts instead
    /// (checked by [`draft::check_draft_model`]); its KV rows live in the
    /// same blocks as the target's.
    pub draft_model: Option<Arc<Model>>,
    /// How KV rows are stored (both models'): f16, Q8_0 or Q4_0.
    pub kv_type: KvType,
    /// The prefix cache's disk tier, if any (`--prefix-cache-dir`).
    pub prefix_disk: Option<disk::DiskCacheConfig>,
    /// Keep every position's rows in sliding-window layers too (llama.cpp's
    /// `--swa-full`); by default they keep only their window, in a pool of
    /// their own ([`Self::windowed_blocks`]).
    pub swa_full: bool,
}

/// Positions kept before a sliding window's first: the AVX-512 tile over
/// a Q8_0/Q4_0 cache starts reading at the multiple of 8 below it (its
/// weights there are zero, but the rows must be finite ones).
pub(crate) const WINDOW_SLACK: usize = 8;

impl EngineConfig {
    /// Defaults for a model: a KV cache of `kv_tokens`, 16-token blocks,
    /// 16 sequences, 512 tokens per step, a 50 ms ITL target.
    pub fn new(kv_tokens: usize, threads: Threads) -> Self {
        EngineConfig {
            kv_tokens,
            block_size: 16,
            max_running: 16,
            max_step_tokens: 512,
            itl_target: Duration::from_millis(50),
            min_prefill_chunk: 4,
            max_waiting: 256,
            prefix_cache: true,
            mask_thread: std::thread::available_parallelism().map_or(1, |n| n.get())
                > threads.get(),
            max_draft: 0,
            drafter: draft::NgramDrafter::default(),
            draft_model: None,
            kv_type: KvType::F16,
            prefix_disk: None,
            swa_full: false,
            threads,
        }
    }

    /// Blocks of the sliding-window layers' own pool, when `model` has such
    /// layers and they keep only their window: each running sequence's
    /// window (and the partial blocks at both ends), one sequence's more
    /// for windows the prefix cache keeps, and a step's new tokens (a step
    /// computes `max_step_tokens` at most, however they are shared).
    /// `None` (every layer in the main pool) with `swa_full`, or when the
    /// windowed pool would not be smaller than the main one. (A disk tier
    /// keeps each pool's blocks in files of their own.)
    pub fn windowed_blocks(&self, model: &Model) -> Option<usize> {
        let window = model.config.swa.as_ref()?.window;
        if self.swa_full {
            return None;
        }
        let per_seq = (window + WINDOW_SLACK).div_ceil(self.block_size) + 2;
        let step = self.max_step_tokens.div_ceil(self.block_size);
        let n = per_seq * (self.max_running + 1) + step;
        (n < self.kv_blocks()).then_some(n)
    }

    /// KV bytes per token of context for `model` and the draft model if
    /// there is one (without the windowed layers when they have a pool of
    /// their own), and the bytes of that pool.
    pub fn kv_bytes(&self, model: &Model) -> (usize, usize) {
        let draft = self.draft_model.as_deref().filter(|_| self.max_draft > 0);
        let draft_bytes = draft.map_or(0, |d| d.config.kv_bytes_per_token_as(self.kv_type));
        match self.windowed_blocks(model) {
            Some(n) => {
                let (main, local) = model.config.kv_bytes_per_token_split(self.kv_type);
                (main + draft_bytes, n * self.block_size * local)
            }
            None => (
                model.config.kv_bytes_per_token_as(self.kv_type) + draft_bytes,
                0,
            ),
        }
    }

    /// KV bytes per token for `model` with rows stored as `ty`, with the
    /// draft model's rows beside them if there is one.
    pub fn kv_bytes_per_token(model: &Model, draft: Option<&Model>, ty: KvType) -> usize {
        model.config.kv_bytes_per_token_as(ty)
            + draft.map_or(0, |d| d.config.kv_bytes_per_token_as(ty))
    }

    /// The KV tokens that fit in `bytes` for `model` (rows stored as
    /// `ty`), with the draft model's rows beside them if there is one.
    pub fn kv_tokens_for_bytes(
        model: &Model,
        draft: Option<&Model>,
        ty: KvType,
        bytes: usize,
    ) -> usize {
        bytes / Self::kv_bytes_per_token(model, draft, ty).max(1)
    }

    /// A serving engine for `model` sized from an operator's choices: the
    /// KV cache takes `kv_bytes` at most, and no more than every running
    /// sequence at full context twice over (the rest is prefix cache), so
    /// small models need not touch a GiB.
    ///
    /// Sliding-window layers that keep only their window take their pool
    /// out of `kv_bytes` first; the rest goes to the other layers.
    pub fn for_model(model: &Model, o: &EngineOptions) -> Self {
        let draft = o.draft_model.as_deref();
        let most = 2 * o.max_running * model.config.context_length;
        let kv_tokens = Self::kv_tokens_for_bytes(model, draft, o.kv_type, o.kv_bytes).min(most);
        let mut ec = EngineConfig::new(kv_tokens, o.threads);
        ec.max_running = o.max_running;
        ec.max_step_tokens = o
            .max_step_tokens
            .unwrap_or(ec.max_step_tokens)
            .max(o.max_running);
        ec.max_waiting = o.max_waiting;
        ec.itl_target = o.itl_target;
        ec.prefix_cache = o.prefix_cache;
        ec.max_draft = o.max_draft;
        ec.draft_model = o.draft_model.clone();
        ec.kv_type = o.kv_type;
        ec.prefix_disk = o.prefix_disk.clone();
        ec.swa_full = o.swa_full;
        if ec.windowed_blocks(model).is_some() {
            // The windowed pool pays only if the rest holds more context.
            let (per_token, windowed) = ec.kv_bytes(model);
            match o.kv_bytes.checked_sub(windowed) {
                Some(rest) if rest / per_token.max(1) >= kv_tokens => {
                    ec.kv_tokens = (rest / per_token.max(1)).min(most);
                }
                _ => ec.swa_full = true,
            }
        }
        ec
    }

    /// One request at a time with room for `tokens` positions (`hasten
    /// run`): the same step as a server's, without a prefix cache.
    pub fn single(tokens: usize, threads: Threads) -> Self {
        EngineConfig {
            max_running: 1,
            max_waiting: 1,
            prefix_cache: false,
            ..EngineConfig::new(tokens, threads)
        }
    }

    pub fn kv_blocks(&self) -> usize {
        self.kv_tokens.div_ceil(self.block_size)
    }

    fn check(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::Config(m.to_string()));
        if self.block_size == 0 || self.kv_tokens == 0 {
            return bad("block size and KV capacity must be positive");
        }
        if self.max_running == 0 || self.max_step_tokens == 0 {
            return bad("max_running and max_step_tokens must be positive");
        }
        if self.max_step_tokens < self.max_running {
            return bad("max_step_tokens must be at least max_running");
        }
        if self.prefix_disk.is_some() && !self.prefix_cache {
            return bad("a prefix cache directory needs the prefix cache (drop --no-prefix-cache)");
        }
        Ok(())
    }
}

/// What an operator chooses for a serving engine (`hasten serve`'s flags);
/// [`EngineConfig::for_model`] turns it into a config for one model.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// KV cache size in bytes at most.
    pub kv_bytes: usize,
    pub max_running: usize,
    pub max_waiting: usize,
    pub itl_target: Duration,
    pub prefix_cache: bool,
    pub threads: Threads,
    /// Tokens in one step at most (vLLM's `--max-num-batched-tokens`,
    /// llama.cpp's `-b`); `None` keeps [`EngineConfig::new`]'s.
    pub max_step_tokens: Option<usize>,
    /// Speculative decoding: drafted tokens per step at most, 0 for none.
    pub max_draft: usize,
    /// Draft with this model rather than by prompt lookup.
    pub draft_model: Option<Arc<Model>>,
    /// How KV rows are stored (`--kv-type`).
    pub kv_type: KvType,
    /// Keep evicted prefix-cache blocks on disk (`--prefix-cache-dir`).
    pub prefix_disk: Option<disk::DiskCacheConfig>,
    /// Sliding-window layers keep every position (`--swa-full`).
    pub swa_full: bool,
}

impl EngineOptions {
    /// `hasten serve`'s defaults: 1 GiB of KV, 16 running, 64 waiting, a
    /// 50 ms ITL target, the prefix cache on.
    pub fn new(threads: Threads) -> Self {
        EngineOptions {
            kv_bytes: 1 << 30,
            max_running: 16,
            max_waiting: 64,
            itl_target: Duration::from_millis(50),
            prefix_cache: true,
            threads,
            max_step_tokens: None,
            max_draft: 0,
            draft_model: None,
            kv_type: KvType::F16,
            prefix_disk: None,
            swa_full: false,
        }
    }
}

/// Figures the engine thread publishes for submitters (no lock).
#[derive(Debug, Default)]
pub(crate) struct Shared {
    waiting: AtomicUsize,
    running: AtomicUsize,
    /// `waiting + running` as one value: admission reads this, since the
    /// two stored apart could show a request moving between them in
    /// neither.
    held: AtomicUsize,
    /// What the `Retry-After` forecast is made from.
    forecast: Mutex<forecast::Inputs>,
    /// Estimated time until the queue ahead of a new request is prefilled.
    eta_us: AtomicU64,
    per_token_ns: AtomicU64,
}

/// A submission on its way to the engine thread (a `Seq` is built there:
/// it holds single-threaded block handles).
struct Pending {
    id: u64,
    req: Request,
    tx: tokio::sync::mpsc::UnboundedSender<Event>,
    received: Instant,
}

enum Msg {
    Submit(Box<Pending>),
    /// Blocks a disk tier read for a waiting request (`true`: the
    /// windowed pool's tier).
    Loaded(disk::Loaded, bool),
    Shutdown,
}

/// The handle to a running engine. Dropping it (or [`Engine::shutdown`])
/// lets the engine finish the requests it has, then stop.
pub struct Engine {
    tx: mpsc::Sender<Msg>,
    shared: Arc<Shared>,
    metrics: Arc<Mutex<Metrics>>,
    limits: Limits,
    cfg: EngineConfig,
    next_id: AtomicU64,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Requests handed to the engine thread and not yet counted by it as waiting.
    in_flight: Arc<AtomicUsize>,
    /// Retry times told to refused requests.
    promises: Mutex<forecast::Promises>,
    /// The model the engine runs (shared: embeddings run it beside the engine).
    model: Arc<Model>,
    /// The vocabulary grammars are compiled against, made at the first
    /// request with a grammar (a trie over the vocabulary: tens of ms).
    grammars: std::sync::OnceLock<std::result::Result<constraint::Grammars, String>>,
    tokenizer: Arc<Tokenizer>,
    /// What the prefix cache's disk tier found at start.
    disk_at_start: Option<disk::DiskStats>,
}

/// What [`RequestStream::on_finish`] calls.
type FinishHook = Box<dyn FnOnce(&Finish) + Send>;

/// The events of one request, in order, ending with `Finished` or `Failed`.
pub struct RequestStream {
    pub id: u64,
    rx: UnboundedReceiver<Event>,
    /// Called with the final record as it passes ([`Self::on_finish`]).
    on_finish: Option<FinishHook>,
}

impl std::fmt::Debug for RequestStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestStream")
            .field("id", &self.id)
            .field("on_finish", &self.on_finish.is_some())
            .finish()
    }
}

impl RequestStream {
    /// Calls `f` with the final record when it is received (a trace, an
    /// account); never if the stream fails or is dropped before.
    pub fn on_finish(mut self, f: impl FnOnce(&Finish) + Send + 'static) -> Self {
        self.on_finish = Some(Box::new(f));
        self
    }

    fn saw(&mut self, ev: &Option<Event>) {
        if let Some(Event::Finished(f)) = ev {
            if let Some(h) = self.on_finish.take() {
                h(f);
            }
        }
    }

    pub async fn recv(&mut self) -> Option<Event> {
        let ev = self.rx.recv().await;
        self.saw(&ev);
        ev
    }

    /// For synchronous callers (tests, benchmarks, the CLI).
    pub fn blocking_recv(&mut self) -> Option<Event> {
        let ev = self.rx.blocking_recv();
        self.saw(&ev);
        ev
    }

    /// Collects the whole output: token ids and the final record.
    pub fn wait(mut self) -> Result<(Vec<TokenEvent>, Finish)> {
        let mut toks = Vec::new();
        while let Some(ev) = self.blocking_recv() {
            match ev {
                Event::Token(t) => toks.push(t),
                Event::Prefill { .. } => {}
                Event::Finished(f) => return Ok((toks, f)),
                Event::Failed(m) => return Err(Error::Config(format!("request failed: {m}"))),
            }
        }
        Err(Error::ShutDown)
    }
}

impl Engine {
    /// Starts the engine thread for `model`. `seed` starts every prefix-cache
    /// hash chain (use one per model file).
    pub fn start(
        model: Arc<Model>,
        tokenizer: Arc<Tokenizer>,
        cfg: EngineConfig,
    ) -> Result<Engine> {
        cfg.check()?;
        hasten_model::kv::check_kv_type(&model.config, cfg.kv_type)?;
        if let Some(d) = &cfg.draft_model {
            hasten_model::kv::check_kv_type(&d.config, cfg.kv_type)?;
        }
        let (kv_bytes_per_token, kv_windowed_bytes) = cfg.kv_bytes(&model);
        let limits = Limits {
            vocab_size: model.config.vocab_size,
            context_length: model.config.context_length,
            kv_tokens: cfg.kv_blocks() * cfg.block_size,
            speculates: cfg.max_draft > 0,
            draft_model: cfg.max_draft > 0 && cfg.draft_model.is_some(),
            kv_type: cfg.kv_type,
            kv_bytes_per_token,
            kv_windowed_bytes,
        };
        let shared = Arc::new(Shared::default());
        // The pool's size is known now: a scrape before the engine thread
        // has built its core (it allocates the KV cache) sees it, not 0
        // (a fleet test read `num_gpu_blocks="0"` that way).
        let metrics = Arc::new(Mutex::new(Metrics {
            kv_blocks_total: cfg.kv_blocks(),
            kv_blocks_free: cfg.kv_blocks(),
            kv_capacity_tokens: cfg.kv_blocks() * cfg.block_size,
            ..Metrics::default()
        }));
        let (tx, rx) = mpsc::channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let flight = in_flight.clone();
        let (m2, s2, c2) = (metrics.clone(), shared.clone(), cfg.clone());
        let tok2 = tokenizer.clone();
        let model2 = model.clone();
        let seed = blocks::chain_hash(0, &[limits.vocab_size as u32]);
        let tier = match &cfg.prefix_disk {
            Some(d) => Some(open_disk_tiers(d, &model, &cfg, &tx)?),
            None => None,
        };
        let disk_at_start = tier.as_ref().map(|(main, local)| {
            disk::DiskStats::sum([Some(main), local.as_ref()].into_iter().flatten())
        });
        let thread = std::thread::Builder::new()
            .name("hasten-engine".into())
            .spawn(move || {
                // The block pool is single-threaded (`Rc`): build the core on its thread.
                let mut core = core::Core::new(model2, tok2, c2, m2, s2, seed);
                if let Some((main, local)) = tier {
                    core.attach_disk(main, local);
                }
                run_loop(&mut core, &rx, &flight);
                // Saves the prefix cache's blocks (if there is a disk tier).
                core.close();
            })
            .map_err(|e| Error::Config(format!("cannot start the engine thread: {e}")))?;
        Ok(Engine {
            tx,
            shared,
            metrics,
            limits,
            cfg,
            next_id: AtomicU64::new(1),
            thread: Some(thread),
            in_flight,
            promises: Default::default(),
            grammars: Default::default(),
            tokenizer,
            disk_at_start,
            model,
        })
    }

    /// The model the engine runs.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The prefix cache's disk tier as the engine found it at start
    /// (block files of this model, bytes, files skipped); `None` without one.
    pub fn prefix_disk_at_start(&self) -> Option<disk::DiskStats> {
        self.disk_at_start
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Validates `spec` against this engine's limits, and compiles its
    /// grammar, if any (an error says what the grammar cannot have).
    pub fn validate(&self, spec: RequestSpec) -> Result<Request> {
        let mut req = Request::validate(spec, &self.limits)?;
        if let Some(g) = &req.spec.grammar {
            req.constraint = Some(self.grammars()?.compile(g)?);
        }
        Ok(req)
    }

    /// Whether `g` can be enforced (the error says what it cannot have).
    pub fn check_grammar(&self, g: &constraint::Grammar) -> Result<()> {
        self.grammars()?.compile(g).map(drop)
    }

    /// The grammar compiler for this model's vocabulary, built on first use.
    fn grammars(&self) -> Result<&constraint::Grammars> {
        self.grammars
            .get_or_init(|| {
                constraint::Grammars::new(self.tokenizer.clone(), self.limits.vocab_size)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| Error::Config(e.clone()))
    }

    /// Estimated wait before a request arriving now starts computing.
    pub fn queue_eta(&self) -> Duration {
        core::queue_eta(&self.shared)
    }

    /// Requests waiting to be admitted.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed) + self.in_flight.load(Ordering::Relaxed)
    }

    /// Sequences in the running batch, as of the last step.
    pub fn running(&self) -> usize {
        self.shared.running.load(Ordering::Relaxed)
    }

    /// Requests the engine holds at most: `max_running` computing plus
    /// `max_waiting` queued, whatever the split.
    pub fn capacity(&self) -> usize {
        self.cfg.max_running + self.cfg.max_waiting
    }

    /// Requests the engine can still take (of [`Engine::capacity`]).
    pub fn room(&self) -> usize {
        self.capacity().saturating_sub(self.held())
    }

    /// Requests the engine holds: queued, computing, or on their way to it.
    fn held(&self) -> usize {
        self.shared.held.load(Ordering::Relaxed) + self.in_flight.load(Ordering::Relaxed)
    }

    /// How long a request refused now should wait before retrying: the time
    /// the next slot not already promised to an earlier refusal frees up,
    /// from the engine's forecast (see `forecast`); at least 100 ms.
    pub fn retry_after(&self) -> Duration {
        let floor = Duration::from_millis(100);
        let now = Instant::now();
        let f = self
            .shared
            .forecast
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .forecast(now);
        self.promises
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .next(now, &f, floor)
            .unwrap_or_else(|| self.queue_eta().max(Duration::from_secs(1)))
    }

    /// Queues `req`. Refuses (before any work) when the queue is full or the
    /// request's deadline cannot be met.
    pub fn submit(&self, req: Request) -> Result<RequestStream> {
        let received = Instant::now();
        let waiting = self.waiting();
        let reject = |e| {
            self.metrics
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .requests_rejected += 1;
            Err(e)
        };
        // Reserve the slot first, then check: two submissions racing for
        // the last slot cannot both see it free (at worst both back off).
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let release = || self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.held() > self.capacity() {
            release();
            let retry_after = self.retry_after();
            return reject(Error::QueueFull {
                waiting,
                retry_after,
            });
        }
        if let Some(deadline) = req.spec().deadline {
            let per_token = Duration::from_nanos(self.shared.per_token_ns.load(Ordering::Relaxed));
            let eta = self.queue_eta() + per_token * req.spec().prompt.len() as u32;
            if received + eta > deadline {
                release();
                return reject(Error::DeadlineUnreachable { eta });
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (etx, erx) = unbounded_channel();
        {
            let spec = req.spec();
            let mut f = self
                .shared
                .forecast
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let work = forecast::Work {
                prefill: spec.prompt.len(),
                decode: f.out_len.left(0, spec.max_tokens, spec.ignore_eos),
            };
            f.in_flight.push((id, work));
        }
        if self
            .tx
            .send(Msg::Submit(Box::new(Pending {
                id,
                req,
                tx: etx,
                received,
            })))
            .is_err()
        {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut f = self
                .shared
                .forecast
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            f.in_flight.retain(|(i, _)| *i != id);
            return Err(Error::ShutDown);
        }
        Ok(RequestStream {
            id,
            rx: erx,
            on_finish: None,
        })
    }

    /// A copy of the engine's metrics.
    pub fn metrics(&self) -> Metrics {
        self.metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Finishes the requests already submitted, then stops the thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.tx.send(Msg::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Opens the disk tier of `cfg` for `model`; its loads come back on `tx`.
/// With a windowed pool, that pool's blocks get a tier of their own in the
/// subdirectory `window` (their rows are other layers', under other block
/// ids), and the byte cap is shared by bytes per token.
fn open_disk_tiers(
    d: &disk::DiskCacheConfig,
    model: &Model,
    cfg: &EngineConfig,
    tx: &mpsc::Sender<Msg>,
) -> Result<(disk::DiskTier, Option<disk::DiskTier>)> {
    let c = &model.config;
    let bpt = |layers: usize| {
        hasten_model::kv::kv_bytes_per_token(layers, c.n_kv_heads, c.head_dim, cfg.kv_type)
    };
    // The windowed layers as `KvCache::windowed` places them.
    let windowed = match (cfg.windowed_blocks(model), &c.swa) {
        (Some(_), Some(w)) if w.layers.len() == c.n_layers => {
            w.layers.iter().filter(|&&l| l).count()
        }
        _ => 0,
    };
    let main_layers = c.n_layers - windowed;
    let id = |layers: usize| disk::Identity {
        model: model.fingerprint(),
        kv_type: cfg.kv_type as u8,
        block_size: cfg.block_size as u32,
        n_layers: layers as u32,
        n_kv_heads: c.n_kv_heads as u32,
        head_dim: c.head_dim as u32,
        block_bytes: (cfg.block_size * bpt(layers)) as u64,
    };
    let open = |dir: disk::DiskCacheConfig, layers: usize, local: bool| {
        let tx = tx.clone();
        disk::DiskTier::open(&dir, id(layers), move |l| {
            let _ = tx.send(Msg::Loaded(l, local));
        })
        .map_err(|e| Error::Config(format!("prefix cache directory {}: {e}", dir.dir.display())))
    };
    if windowed == 0 {
        return Ok((open(d.clone(), main_layers, false)?, None));
    }
    let share = d.max_bytes as f64 * bpt(windowed) as f64 / bpt(c.n_layers) as f64;
    let local = disk::DiskCacheConfig {
        dir: d.dir.join("window"),
        max_bytes: share as u64,
    };
    let main = disk::DiskCacheConfig {
        dir: d.dir.clone(),
        max_bytes: d.max_bytes - local.max_bytes,
    };
    Ok((
        open(main, main_layers, false)?,
        Some(open(local, windowed, true)?),
    ))
}

fn run_loop(core: &mut core::Core, rx: &mpsc::Receiver<Msg>, in_flight: &AtomicUsize) {
    let mut draining = false;
    loop {
        // Block only when there is nothing to compute (requests waiting
        // for their blocks from disk wait for the message that brings them).
        let first = if !core.has_work() {
            if draining && core.is_idle() {
                return;
            }
            match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => return,
            }
        } else {
            None
        };
        for msg in first
            .into_iter()
            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
        {
            match msg {
                Msg::Submit(p) => {
                    core.add(core::Seq::new(p.id, p.req, p.tx, p.received));
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                }
                Msg::Loaded(l, local) => core.install(l, local),
                Msg::Shutdown => draining = true,
            }
        }
        if core.has_work() {
            core.step();
        }
    }
}

/// Test support: the core without its thread, stepped by hand.
#[doc(hidden)]
pub mod testing {
    pub use crate::core::{Core, Seq};
}
