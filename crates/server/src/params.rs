//! From OpenAI request bodies to validated engine work: parameter ranges
//! (each error names its parameter), refusal of parameters that would change
//! the result but are not supported, prompt rendering and tokenization.
//!
//! Everything here is plain synchronous code; handlers run it on the
//! blocking pool so tokenization never stalls the async runtime.

use crate::error::{Error, Result};
use hasten_engine::constraint::Grammar;
use hasten_engine::{Limits, RequestSpec, Speculate};
use hasten_model::chat::{ChatTemplate, Message, TemplateVars, RESERVED_VARS};
use hasten_model::output::OutputSpec;
use hasten_model::prompt;
pub use hasten_model::prompt::Ending;
use hasten_model::sampler::SamplingParams;
use hasten_model::tokenizer::Tokenizer;
use hasten_protocol::chat::{ChatCompletionRequest, ChatMessage, Content};
use hasten_protocol::completions::{CompletionRequest, Prompt};
use hasten_protocol::{Extra, Sampling};
use serde_json::Value;

/// Most choices per request (`n`, times the prompts of a batch).
pub const MAX_CHOICES: usize = 16;
/// OpenAI's limit on stop sequences.
pub const MAX_STOPS: usize = 4;

/// What the server allows beyond the engine's own limits.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    pub max_prompt_tokens: Option<usize>,
    pub max_output_tokens: Option<usize>,
}

/// How a choice's log-probabilities are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogprobStyle {
    None,
    /// Chat: `logprobs.content[]` with `top_logprobs` of this many.
    Chat(usize),
    /// Completions: parallel arrays, this many alternatives.
    Legacy(usize),
}

/// A request turned into engine work: one spec per choice.
#[derive(Debug, Clone)]
pub struct Plan {
    pub specs: Vec<RequestSpec>,
    pub stream: bool,
    pub include_usage: bool,
    /// Usage on every chunk (`stream_options.continuous_usage_stats`).
    pub continuous_usage: bool,
    pub logprobs: LogprobStyle,
    /// How chat answers split into reasoning, text and tool calls.
    pub output: Option<OutputSpec>,
    /// The field a grammar error is about (`response_format` or `tools`).
    pub grammar_field: &'static str,
    /// Schemas to check before anything runs (each tool's parameters),
    /// with the field each is in.
    pub schemas: Vec<(String, Grammar)>,
}

/// Fields outside our model that are harmless to ignore (a message's
/// `reasoning_content`, sent back by clients, is not shown to templates).
const IGNORED: &[&str] = &[
    "store",
    "metadata",
    "service_tier",
    "user",
    "stream_options",
    "reasoning_content",
];

/// Refuses fields we do not implement unless they hold their neutral value.
pub fn check_extra(extra: &Extra, prefix: &str) -> Result<()> {
    for (k, v) in extra {
        if IGNORED.contains(&k.as_str()) || v.is_null() {
            continue;
        }
        let neutral = match k.as_str() {
            "echo" => v == &Value::Bool(false),
            "best_of" => v.as_u64() == Some(1),
            "suffix" => v.as_str() == Some(""),
            "tools" | "functions" => v.as_array().is_some_and(Vec::is_empty),
            "tool_choice" | "function_call" => v.as_str() == Some("none"),
            "parallel_tool_calls" => v.is_boolean(),
            "response_format" => v.get("type").and_then(Value::as_str) == Some("text"),
            _ => false,
        };
        if !neutral {
            return Err(Error::unsupported(
                &format!("{prefix}{k}"),
                "hasten does not implement it, and ignoring it would change the result",
            ));
        }
    }
    Ok(())
}

fn range(v: Option<f64>, name: &str, lo: f64, hi: f64, default: f64) -> Result<f32> {
    let x = v.unwrap_or(default);
    if !(x.is_finite() && x >= lo && x <= hi) {
        return Err(Error::bad(
            format!("{name} must be between {lo} and {hi}, got {x}"),
            name,
        ));
    }
    Ok(x as f32)
}

/// Sampling settings, stops and `n` from the shared fields (OpenAI defaults:
/// temperature 1, top_p 1; top_k and min_p off).
fn sampling(s: &Sampling, vocab: usize) -> Result<(SamplingParams, Vec<String>, usize)> {
    let temperature = range(s.temperature, "temperature", 0.0, 2.0, 1.0)?;
    let top_p = range(s.top_p, "top_p", 0.0, 1.0, 1.0)?;
    if top_p == 0.0 {
        return Err(Error::bad("top_p must be greater than 0", "top_p"));
    }
    let top_k = match s.top_k.unwrap_or(0) {
        -1 | 0 => 0,
        k if k > 0 => k as usize,
        k => {
            return Err(Error::bad(
                format!("top_k must be -1, 0 or positive, got {k}"),
                "top_k",
            ))
        }
    };
    let min_p = range(s.min_p, "min_p", 0.0, 1.0, 0.0)?;
    let presence_penalty = range(s.presence_penalty, "presence_penalty", -2.0, 2.0, 0.0)?;
    let frequency_penalty = range(s.frequency_penalty, "frequency_penalty", -2.0, 2.0, 0.0)?;
    let repetition_penalty = range(s.repetition_penalty, "repetition_penalty", 0.01, 10.0, 1.0)?;
    let n = s.n.unwrap_or(1);
    if !(1..=MAX_CHOICES as i64).contains(&n) {
        return Err(Error::bad(
            format!("n must be between 1 and {MAX_CHOICES}, got {n}"),
            "n",
        ));
    }
    let mut logit_bias = Vec::new();
    for (k, &b) in s.logit_bias.iter().flatten() {
        let id: u32 = k
            .parse()
            .ok()
            .filter(|&t: &u32| (t as usize) < vocab)
            .ok_or_else(|| {
                Error::bad(
                    format!("logit_bias key {k:?} is not a token id below {vocab}"),
                    "logit_bias",
                )
            })?;
        if !(-100.0..=100.0).contains(&b) {
            return Err(Error::bad(
                format!("logit_bias values must be in [-100, 100], got {b}"),
                "logit_bias",
            ));
        }
        logit_bias.push((id, b as f32));
    }
    let stop = s.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if stop.len() > MAX_STOPS {
        return Err(Error::bad(
            format!("at most {MAX_STOPS} stop sequences, got {}", stop.len()),
            "stop",
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(Error::bad("stop sequences must not be empty", "stop"));
    }
    let seed = match s.seed {
        Some(x) => x as u64,
        None => rand::random(),
    };
    let params = SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        repetition_penalty,
        frequency_penalty,
        presence_penalty,
        penalty_last_n: 64,
        logit_bias,
        seed,
    };
    // The engine's `Request::validate` checks the whole spec once more
    // (the one validation every request passes); these checks exist to
    // name the OpenAI parameter at fault.
    Ok((params, stop, n as usize))
}

/// `max_tokens` checked against the server limit, or the room left in the
/// context when absent.
fn max_tokens(
    given: Option<i64>,
    name: &str,
    prompt: usize,
    lim: &Limits,
    sl: &ServerLimits,
) -> Result<usize> {
    let cap = sl.max_output_tokens.unwrap_or(usize::MAX);
    match given {
        Some(m) if m < 1 => Err(Error::bad(
            format!("{name} must be at least 1, got {m}"),
            name,
        )),
        Some(m) if m as u64 > cap as u64 => Err(Error::bad(
            format!("{name} is {m}, above this server's limit of {cap}"),
            name,
        )),
        Some(m) => Ok(m as usize),
        None => {
            let room = lim.context_length.min(lim.kv_tokens).saturating_sub(prompt);
            Ok(room.clamp(1, cap))
        }
    }
}

fn check_prompt_len(len: usize, sl: &ServerLimits, field: &'static str) -> Result<()> {
    match sl.max_prompt_tokens {
        Some(max) if len > max => Err(Error::ContextLength {
            message: format!("the prompt has {len} tokens; this server accepts at most {max}"),
            param: Some(field),
        }),
        _ => Ok(()),
    }
}

/// The most prompt tokens a request can have: one fewer than the context
/// (or the KV cache) holds, so one token can be generated, and at most the
/// server's `--max-prompt-tokens`.
pub fn max_prompt_tokens(lim: &Limits, sl: &ServerLimits) -> usize {
    let room = lim.context_length.min(lim.kv_tokens).saturating_sub(1);
    sl.max_prompt_tokens.map_or(room, |m| m.min(room))
}

/// Refuses, before any template renders or tokenizer runs, a prompt text
/// of `bytes` bytes that must have more tokens than the server accepts
/// (no token stands for more than `max_token_bytes` bytes). This bounds the
/// work and memory an oversized prompt can cost.
pub fn check_prompt_bytes(
    bytes: usize,
    max_token_bytes: usize,
    lim: &Limits,
    sl: &ServerLimits,
    field: &'static str,
) -> Result<()> {
    let at_least = bytes.div_ceil(max_token_bytes.max(1));
    let max = max_prompt_tokens(lim, sl);
    if at_least > max {
        return Err(Error::ContextLength {
            message: format!(
                "the prompt is {bytes} bytes, so at least {at_least} tokens (no token of this \
                 model covers more than {max_token_bytes} bytes); this server accepts at most \
                 {max} prompt tokens"
            ),
            param: Some(field),
        });
    }
    Ok(())
}

/// Bytes of message text a chat request carries (what the template renders).
fn chat_bytes(msgs: &[ChatMessage]) -> usize {
    let calls = |m: &ChatMessage| -> usize {
        m.tool_calls
            .iter()
            .flatten()
            .map(|c| c.function.arguments.len() + c.function.name.len())
            .sum()
    };
    msgs.iter()
        .map(|m| {
            calls(m)
                + match &m.content {
                    None => 0,
                    Some(Content::Text(t)) => t.len(),
                    Some(Content::Parts(ps)) => ps
                        .iter()
                        .filter_map(|p| p.text.as_ref())
                        .map(|t| t.len() + 1)
                        .sum(),
                }
        })
        .sum()
}

/// Message contents flattened to text, roles checked; an assistant turn's
/// tool calls with their arguments as objects and a tool result's
/// `tool_call_id`, as `transformers` templates expect them.
pub fn chat_messages(msgs: &[ChatMessage]) -> Result<Vec<Message>> {
    if msgs.is_empty() {
        return Err(Error::bad("messages must not be empty", "messages"));
    }
    let mut out = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        check_extra(&m.extra, &format!("messages[{i}]."))?;
        let role = match m.role.as_str() {
            "developer" => "system",
            r @ ("system" | "user" | "assistant" | "tool") => r,
            r => {
                return Err(Error::bad(
                    format!("messages[{i}].role {r:?} is not supported (system, developer, user, assistant, tool)"),
                    &format!("messages[{i}].role"),
                ))
            }
        };
        let mut msg = Message::new(role, &message_text(m, i)?);
        msg.name = m.name.clone();
        if let Some(calls) = &m.tool_calls {
            if role != "assistant" {
                return Err(Error::bad(
                    format!("messages[{i}].tool_calls: only assistant messages carry tool calls"),
                    &format!("messages[{i}].tool_calls"),
                ));
            }
            msg.tool_calls = Some(calls.iter().map(template_call).collect());
        }
        if role == "tool" {
            msg.tool_call_id = m.tool_call_id.clone();
        }
        out.push(msg);
    }
    Ok(out)
}

/// A call as templates read it: `function.arguments` an object when the
/// text is JSON (vLLM and llama.cpp do the same), else the text.
fn template_call(c: &hasten_protocol::chat::ToolCall) -> Value {
    let args = serde_json::from_str::<Value>(&c.function.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::String(c.function.arguments.clone()));
    serde_json::json!({"id": c.id, "type": c.kind,
        "function": {"name": c.function.name, "arguments": args}})
}

/// A message's content as one text (`null` is empty, as vLLM has it).
fn message_text(m: &ChatMessage, i: usize) -> Result<String> {
    Ok(match &m.content {
        None => String::new(),
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Parts(parts)) => {
            let mut texts = Vec::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => texts.push(t.as_str()),
                    (kind, _) => {
                        return Err(Error::unsupported(
                            &format!("messages[{i}].content[{j}].type"),
                            &format!(
                            "content parts of type {kind:?} (only \"text\" with a \"text\" field)"
                        ),
                        ))
                    }
                }
            }
            texts.join("\n")
        }
    })
}

/// The request's `chat_template_kwargs` (vLLM's and llama-server's name;
/// taken out of `extra`): variables passed to the chat template, e.g.
/// Qwen3's `enable_thinking`. An object whose keys are not the renderer's
/// own variables.
pub fn template_kwargs(extra: &mut Extra) -> Result<TemplateVars> {
    const FIELD: &str = "chat_template_kwargs";
    match extra.remove(FIELD) {
        None | Some(Value::Null) => Ok(TemplateVars::new()),
        Some(Value::Object(vars)) => {
            if let Some(k) = RESERVED_VARS.iter().find(|k| vars.contains_key(**k)) {
                return Err(Error::bad(
                    format!("{FIELD}.{k} is set by the server and cannot be passed"),
                    FIELD,
                ));
            }
            Ok(vars)
        }
        Some(_) => Err(Error::bad(format!("{FIELD} must be an object"), FIELD)),
    }
}

/// The ending the request asks for, from vLLM's `continue_final_message`
/// and `add_generation_prompt` (taken out of `extra`); with neither, a
/// final assistant message is continued.
pub fn ending(extra: &mut Extra, msgs: &[Message]) -> Result<Ending> {
    let mut flag = |name: &str| -> Result<Option<bool>> {
        match extra.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(Error::bad(format!("{name} must be a boolean"), name)),
        }
    };
    let cont = flag("continue_final_message")?;
    let gen = flag("add_generation_prompt")?;
    let last_assistant = msgs.last().is_some_and(|m| m.role == "assistant");
    match (cont, gen) {
        (Some(true), Some(true)) => Err(Error::bad(
            "continue_final_message and add_generation_prompt cannot both be true",
            "continue_final_message",
        )),
        (Some(true), _) if !last_assistant => Err(Error::bad(
            "continue_final_message needs the last message to be the assistant's",
            "continue_final_message",
        )),
        (Some(true), _) => Ok(Ending::Continue),
        (None, None) if last_assistant => Ok(Ending::Continue),
        (_, Some(false)) => Ok(Ending::Nothing),
        _ => Ok(Ending::Generate),
    }
}

/// Renders and tokenizes a chat prompt through the one prompt builder
/// ([`hasten_model::prompt`]); messages the template refuses are a bad
/// request naming `messages`. Also says whether the prompt leaves a
/// thinking block open.
pub fn chat_prompt(
    msgs: &[Message],
    template: &ChatTemplate,
    tok: &Tokenizer,
    how: Ending,
    vars: &TemplateVars,
) -> Result<(Vec<u32>, bool)> {
    let err = |e| match e {
        hasten_model::Error::Template(m) => Error::bad(
            format!("the chat template could not render these messages: chat template: {m}"),
            "messages",
        ),
        e => Error::Internal(e.to_string()),
    };
    let text = prompt::chat_text(template, msgs, how, vars).map_err(err)?;
    let tokens = prompt::rendered_tokens(template, tok, &text).map_err(err)?;
    Ok((tokens, hasten_model::output::opens_thinking(&text)))
}

/// The plan of a request: one spec per prompt and choice. `max` is the
/// output-limit parameter's name and value, `flags` (stream, include_usage).
fn plan(
    (prompts, field): (Vec<Vec<u32>>, &'static str),
    s: &Sampling,
    (max_name, max_given): (&str, Option<i64>),
    style: LogprobStyle,
    (stream, include_usage): (bool, bool),
    lim: &Limits,
    sl: &ServerLimits,
) -> Result<Plan> {
    let logprobs = logprob_count(style);
    let (params, stop, n) = sampling(s, lim.vocab_size)?;
    if prompts.len() * n > MAX_CHOICES {
        return Err(Error::bad(
            format!(
                "{} prompts x n={n} is more than {MAX_CHOICES} choices",
                prompts.len()
            ),
            "n",
        ));
    }
    let mut out = Vec::with_capacity(prompts.len() * n);
    for p in prompts {
        check_prompt_len(p.len(), sl, field)?;
        let max = max_tokens(max_given, max_name, p.len(), lim, sl)?;
        for j in 0..n {
            let mut params = params.clone();
            // Choices differ but stay reproducible for a given seed.
            params.seed = params.seed.wrapping_add(j as u64);
            out.push(RequestSpec {
                prompt: p.clone(),
                params,
                max_tokens: max,
                stop: stop.clone(),
                stop_tokens: Vec::new(),
                ignore_eos: s.ignore_eos.unwrap_or(false),
                deadline: None,
                logprobs,
                // A unary answer is read whole: no wake-up per token.
                deliver_at_end: !stream,
                grammar: None,
                special_text: false,
                speculate: Speculate::Auto,
            });
        }
    }
    Ok(Plan {
        specs: out,
        stream,
        include_usage,
        continuous_usage: stream
            && s.stream_options
                .as_ref()
                .and_then(|o| o.continuous_usage_stats)
                .unwrap_or(false),
        logprobs: style,
        output: None,
        grammar_field: "response_format",
        schemas: Vec::new(),
    })
}

/// A request's `"speculate"` (taken out of `extra`): `off` turns the
/// engine's speculative decoding off for it; `ngram` asks for prompt
/// lookup, which needs a speculating server; `draft` for its draft model
/// (`--draft-model`).
fn speculate(extra: &mut Extra, lim: &Limits) -> Result<Speculate> {
    const F: &str = "speculate";
    match extra.remove(F) {
        None | Some(Value::Null) => Ok(Speculate::Auto),
        Some(Value::String(m)) => match m.as_str() {
            "off" => Ok(Speculate::Off),
            "ngram" if lim.speculates => Ok(Speculate::Ngram),
            "draft" if lim.draft_model => Ok(Speculate::Model),
            "ngram" => Err(Error::bad(
                "this server runs without speculative decoding (start it with --speculate ngram)",
                F,
            )),
            "draft" => Err(Error::bad(
                "this server has no draft model (start it with --draft-model FILE)",
                F,
            )),
            other => Err(Error::bad(
                format!("speculate {other:?} is not off, ngram or draft"),
                F,
            )),
        },
        Some(_) => Err(Error::bad("speculate must be a string", F)),
    }
}

fn stream_flags(s: &Sampling) -> Result<(bool, bool)> {
    let stream = s.stream.unwrap_or(false);
    let usage = s.stream_options.as_ref().and_then(|o| o.include_usage);
    if usage.is_some() && !stream {
        return Err(Error::bad(
            "stream_options is only allowed with stream: true",
            "stream_options",
        ));
    }
    Ok((stream, usage.unwrap_or(false)))
}

/// What a chat prompt is rendered from: the messages, how the prompt
/// ends, the template variables (`chat_template_kwargs` and the `tools`
/// shown to the model) and the request's tools; the fields used are taken
/// out of `extra`. Chat requests and `/tokenize` share it.
#[allow(clippy::type_complexity)]
pub fn template_input(
    messages: &[ChatMessage],
    extra: &mut Extra,
) -> Result<(
    Vec<Message>,
    Ending,
    TemplateVars,
    Option<crate::tools::Tools>,
)> {
    let msgs = chat_messages(messages)?;
    let how = ending(extra, &msgs)?;
    let mut vars = template_kwargs(extra)?;
    let tools = crate::tools::take(extra)?;
    if let Some(list) = tools.as_ref().and_then(|t| t.for_template()) {
        vars.insert("tools".into(), list);
    }
    // OpenAI's `reasoning_effort` reaches the template as the variable of
    // that name (gpt-oss's templates read it), as vLLM passes it;
    // `chat_template_kwargs` win.
    match extra.remove("reasoning_effort") {
        None | Some(Value::Null) => {}
        Some(Value::String(e)) if ["minimal", "low", "medium", "high"].contains(&e.as_str()) => {
            vars.entry("reasoning_effort").or_insert(Value::String(e));
        }
        Some(v) => {
            return Err(Error::bad(
                format!("reasoning_effort must be minimal, low, medium or high, got {v}"),
                "reasoning_effort",
            ))
        }
    }
    Ok((msgs, how, vars, tools))
}

pub fn plan_chat(
    r: &ChatCompletionRequest,
    template: &ChatTemplate,
    tok: &Tokenizer,
    lim: &Limits,
    sl: &ServerLimits,
) -> Result<Plan> {
    check_prompt_bytes(
        chat_bytes(&r.messages),
        tok.max_token_bytes(),
        lim,
        sl,
        "messages",
    )?;
    let mut extra = r.extra.clone();
    let (msgs, how, vars, tools) = template_input(&r.messages, &mut extra)?;
    let answer = crate::format::response_format(&mut extra)?;
    let spec_on = speculate(&mut extra, lim)?;
    check_extra(&extra, "")?;
    let (stream, include_usage) = stream_flags(&r.sampling)?;
    let logprobs = match (r.logprobs.unwrap_or(false), r.top_logprobs) {
        (false, Some(_)) => {
            return Err(Error::bad(
                "top_logprobs requires logprobs: true",
                "top_logprobs",
            ))
        }
        (false, None) => LogprobStyle::None,
        (true, n) => LogprobStyle::Chat(top_count(n, "top_logprobs")?),
    };
    let (prompt, thinking) = chat_prompt(&msgs, template, tok, how, &vars)?;
    let (name, given) = match r.max_completion_tokens {
        Some(m) => ("max_completion_tokens", Some(m)),
        None => ("max_tokens", r.sampling.max_tokens),
    };
    let flags = (stream, include_usage);
    let mut p = plan(
        (vec![prompt], "messages"),
        &r.sampling,
        (name, given),
        logprobs,
        flags,
        lim,
        sl,
    )?;
    let syntax = template.tool_syntax;
    let reading = tools
        .as_ref()
        .filter(|t| t.choice != crate::tools::Choice::None);
    let grammar = match reading {
        Some(t) => t.grammar(syntax, tok, answer.as_ref())?,
        None => answer,
    };
    p.output = Some(OutputSpec {
        thinking: template.thinks.then_some(thinking),
        tools: reading.map(|t| (syntax, t.names.clone())),
        single_call: reading.is_some_and(|t| !t.parallel),
    });
    if let Some(t) = reading {
        p.grammar_field = "tools";
        p.schemas = t.schemas().collect();
    }
    // Calls written with control tokens (Mistral's `[TOOL_CALLS]`) must
    // reach the parser as text.
    let special = reading.is_some()
        && tok
            .token_id(syntax.marker())
            .is_some_and(|id| tok.token_bytes(id).is_empty());
    for s in &mut p.specs {
        s.grammar = grammar.clone();
        s.special_text = special;
        s.speculate = spec_on;
    }
    Ok(p)
}

fn top_count(n: Option<i64>, name: &str) -> Result<usize> {
    let n = n.unwrap_or(0);
    let max = hasten_engine::request::MAX_TOP_LOGPROBS as i64;
    if !(0..=max).contains(&n) {
        return Err(Error::bad(
            format!("{name} must be between 0 and {max}, got {n}"),
            name,
        ));
    }
    Ok(n as usize)
}

fn logprob_count(s: LogprobStyle) -> Option<usize> {
    match s {
        LogprobStyle::None => None,
        LogprobStyle::Chat(n) | LogprobStyle::Legacy(n) => Some(n),
    }
}

/// Token ids of each prompt of a completions request; a text that must
/// have more tokens than the server accepts is refused before tokenizing.
pub fn completion_prompts(
    p: &Prompt,
    tok: &Tokenizer,
    lim: &Limits,
    sl: &ServerLimits,
) -> Result<Vec<Vec<u32>>> {
    let max_bytes = tok.max_token_bytes();
    let enc = |t: &str| {
        check_prompt_bytes(t.len(), max_bytes, lim, sl, "prompt")?;
        prompt::text_tokens(tok, t).map_err(|e| Error::Internal(e.to_string()))
    };
    let out = match p {
        Prompt::Text(t) => vec![enc(t)?],
        Prompt::Texts(ts) => ts.iter().map(|t| enc(t)).collect::<Result<_>>()?,
        Prompt::Tokens(ids) => vec![ids.clone()],
        Prompt::TokenLists(l) => l.clone(),
    };
    if out.is_empty() {
        return Err(Error::bad("prompt must not be an empty list", "prompt"));
    }
    Ok(out)
}

pub fn plan_completion(
    r: &CompletionRequest,
    tok: &Tokenizer,
    lim: &Limits,
    sl: &ServerLimits,
) -> Result<Plan> {
    let mut extra = r.extra.clone();
    let grammar = crate::format::response_format(&mut extra)?;
    let spec_on = speculate(&mut extra, lim)?;
    check_extra(&extra, "")?;
    let (stream, include_usage) = stream_flags(&r.sampling)?;
    let logprobs = match r.logprobs {
        None => LogprobStyle::None,
        Some(n) => LogprobStyle::Legacy(top_count(Some(n), "logprobs")?),
    };
    let prompts = completion_prompts(&r.prompt, tok, lim, sl)?;
    let max = ("max_tokens", r.sampling.max_tokens);
    let mut p = plan(
        (prompts, "prompt"),
        &r.sampling,
        max,
        logprobs,
        (stream, include_usage),
        lim,
        sl,
    )?;
    for s in &mut p.specs {
        s.grammar = grammar.clone();
        s.speculate = spec_on;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_assistant_message_is_continued_unless_told_otherwise() {
        let ex = |j: &str| -> Extra { serde_json::from_str(j).unwrap() };
        let user = [Message::new("user", "hi")];
        let prefill = [Message::new("user", "hi"), Message::new("assistant", "Hel")];
        let e = |j: &str, m: &[Message]| ending(&mut ex(j), m);
        assert_eq!(e("{}", &user).unwrap(), Ending::Generate);
        assert_eq!(e("{}", &prefill).unwrap(), Ending::Continue);
        assert_eq!(
            e(r#"{"continue_final_message":false}"#, &prefill).unwrap(),
            Ending::Generate
        );
        assert_eq!(
            e(
                r#"{"continue_final_message":true,"add_generation_prompt":false}"#,
                &prefill
            )
            .unwrap(),
            Ending::Continue
        );
        assert_eq!(
            e(r#"{"add_generation_prompt":false}"#, &user).unwrap(),
            Ending::Nothing
        );
        assert!(e(r#"{"continue_final_message":true}"#, &user).is_err());
        assert!(e(
            r#"{"continue_final_message":true,"add_generation_prompt":true}"#,
            &prefill
        )
        .is_err());
        assert!(e(r#"{"add_generation_prompt":"yes"}"#, &user).is_err());
        let mut x = ex(r#"{"continue_final_message":true,"echo":false}"#);
        ending(&mut x, &prefill).unwrap();
        assert_eq!(x.len(), 1, "the flags are taken out of extra");
    }

    #[test]
    fn chat_template_kwargs_reach_the_template() {
        let ex = |j: &str| -> Extra { serde_json::from_str(j).unwrap() };
        let mut x = ex(r#"{"chat_template_kwargs":{"enable_thinking":false},"echo":false}"#);
        let vars = template_kwargs(&mut x).unwrap();
        assert_eq!(x.len(), 1, "taken out of extra");
        let t = ChatTemplate::new(
            "{{ messages[0].content }}{% if enable_thinking is defined and not enable_thinking %}<no-think>{% endif %}",
            "",
            "",
        )
        .unwrap();
        let msgs = [Message::new("user", "hi")];
        assert_eq!(t.render_with(&msgs, true, &vars).unwrap(), "hi<no-think>");
        assert_eq!(t.render(&msgs, true).unwrap(), "hi");
        for (j, what) in [
            (r#"{"chat_template_kwargs":[1]}"#, "must be an object"),
            (
                r#"{"chat_template_kwargs":{"messages":[]}}"#,
                "set by the server",
            ),
        ] {
            match template_kwargs(&mut ex(j)) {
                Err(Error::BadRequest { param, message, .. }) => {
                    assert_eq!(param.as_deref(), Some("chat_template_kwargs"));
                    assert!(message.contains(what), "{message}");
                }
                other => panic!("{j}: {other:?}"),
            }
        }
    }

    #[test]
    fn speculate_is_checked_against_the_engine() {
        let lim = |speculates, draft_model| Limits {
            vocab_size: 10,
            context_length: 100,
            kv_tokens: 80,
            speculates,
            draft_model,
            kv_type: hasten_kernels::attention::KvType::F16,
            kv_bytes_per_token: 0,
            kv_windowed_bytes: 0,
        };
        let ex = |j: &str| -> Extra { serde_json::from_str(j).unwrap() };
        let ok = |j, l| speculate(&mut ex(j), &l).unwrap();
        assert_eq!(ok("{}", lim(false, false)), Speculate::Auto);
        assert_eq!(
            ok(r#"{"speculate":"off"}"#, lim(true, false)),
            Speculate::Off
        );
        assert_eq!(
            ok(r#"{"speculate":"ngram"}"#, lim(true, true)),
            Speculate::Ngram
        );
        assert_eq!(
            ok(r#"{"speculate":"draft"}"#, lim(true, true)),
            Speculate::Model
        );
        for (j, speculates, draft) in [
            (r#"{"speculate":"ngram"}"#, false, false),
            (r#"{"speculate":"draft"}"#, true, false),
            (r#"{"speculate":"maybe"}"#, true, true),
            (r#"{"speculate":1}"#, true, true),
        ] {
            match speculate(&mut ex(j), &lim(speculates, draft)) {
                Err(Error::BadRequest { param, .. }) => {
                    assert_eq!(param.as_deref(), Some("speculate"))
                }
                other => panic!("{j}: {other:?}"),
            }
        }
    }

    #[test]
    fn reasoning_effort_is_a_template_variable() {
        let msgs = [ChatMessage::new("user", "hi")];
        let input = |j: &str| {
            let mut x: Extra = serde_json::from_str(j).unwrap();
            template_input(&msgs, &mut x).map(|(_, _, vars, _)| vars)
        };
        let vars = input(r#"{"reasoning_effort":"low"}"#).unwrap();
        assert_eq!(vars["reasoning_effort"], "low");
        let vars = input(
            r#"{"reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":"high"}}"#,
        )
        .unwrap();
        assert_eq!(vars["reasoning_effort"], "high");
        assert!(matches!(
            input(r#"{"reasoning_effort":"extreme"}"#),
            Err(Error::BadRequest { param: Some(p), .. }) if p == "reasoning_effort"
        ));
    }

    #[test]
    fn unsupported_fields_are_named_unless_neutral() {
        let ex = |j: &str| -> Extra { serde_json::from_str(j).unwrap() };
        assert!(check_extra(&ex(r#"{"echo":false,"best_of":1,"tools":[],"store":true,"response_format":{"type":"text"}}"#), "").is_ok());
        for (j, name) in [
            (r#"{"tools":[{"type":"function"}]}"#, "tools"),
            (r#"{"echo":true}"#, "echo"),
            (r#"{"frobnicate":1}"#, "frobnicate"),
        ] {
            match check_extra(&ex(j), "") {
                Err(Error::BadRequest { param, .. }) => assert_eq!(param.as_deref(), Some(name)),
                other => panic!("{j}: {other:?}"),
            }
        }
    }

    #[test]
    fn ranges_name_the_parameter() {
        let bad = |s: Sampling| match sampling(&s, 100) {
            Err(Error::BadRequest { param, .. }) => param.unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            bad(Sampling {
                temperature: Some(3.0),
                ..Default::default()
            }),
            "temperature"
        );
        assert_eq!(
            bad(Sampling {
                top_p: Some(0.0),
                ..Default::default()
            }),
            "top_p"
        );
        assert_eq!(
            bad(Sampling {
                n: Some(0),
                ..Default::default()
            }),
            "n"
        );
        assert_eq!(
            bad(Sampling {
                top_k: Some(-5),
                ..Default::default()
            }),
            "top_k"
        );
        let mut lb = std::collections::BTreeMap::new();
        lb.insert("100".to_string(), 1.0);
        assert_eq!(
            bad(Sampling {
                logit_bias: Some(lb),
                ..Default::default()
            }),
            "logit_bias"
        );
        let (p, stop, n) = sampling(
            &Sampling {
                seed: Some(7),
                n: Some(3),
                ..Default::default()
            },
            100,
        )
        .unwrap();
        assert_eq!((p.seed, p.temperature, stop.len(), n), (7, 1.0, 0, 3));
    }

    #[test]
    fn max_tokens_defaults_to_the_room_left() {
        let lim = Limits {
            vocab_size: 10,
            context_length: 100,
            kv_tokens: 80,
            speculates: false,
            draft_model: false,
            kv_type: hasten_kernels::attention::KvType::F16,
            kv_bytes_per_token: 0,
            kv_windowed_bytes: 0,
        };
        let sl = ServerLimits {
            max_prompt_tokens: None,
            max_output_tokens: Some(50),
        };
        assert_eq!(max_tokens(None, "max_tokens", 40, &lim, &sl).unwrap(), 40);
        assert_eq!(max_tokens(None, "max_tokens", 10, &lim, &sl).unwrap(), 50);
        assert!(max_tokens(Some(51), "max_tokens", 10, &lim, &sl).is_err());
        assert!(max_tokens(Some(0), "max_tokens", 10, &lim, &sl).is_err());
    }
}
