//! What the requests say: random prompts of given lengths, a shared system
//! prompt (prefix caching), JSONL prompts or conversations, ShareGPT files.
//! A workload is a list of [`Item`]s built before the run from a seed, so
//! two runs (or two servers) get the same requests in the same order.

use crate::{Error, Result};
use hasten_protocol::chat::{ChatCompletionRequest, ChatMessage};
use hasten_protocol::completions::{CompletionRequest, Prompt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

/// One request of a workload, before sampling settings are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub input: Input,
    /// Tokens to ask for (`max_tokens`).
    pub output_tokens: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Plain text: a completion prompt, or one user message in chat.
    Text {
        system: Option<String>,
        text: String,
    },
    /// A conversation (chat only).
    Messages(Vec<ChatMessage>),
}

/// Which endpoint the requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    Chat,
    Completions,
    /// OpenAI's Responses API (`/v1/responses`): the same conversation as
    /// input items, the system prompt as `instructions`.
    Responses,
}

/// A length: fixed, or uniform in `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lengths {
    pub lo: u32,
    pub hi: u32,
}

impl Lengths {
    pub fn fixed(n: u32) -> Self {
        Lengths { lo: n, hi: n }
    }

    /// `"128"` or `"64..256"`.
    pub fn parse(s: &str) -> Result<Self> {
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| Error::Config(format!("bad length {s:?}: want N or LO..HI")))
        };
        let l = match s.split_once("..") {
            Some((a, b)) => Lengths {
                lo: num(a)?,
                hi: num(b.trim_start_matches('=')).unwrap_or(0),
            },
            None => Lengths::fixed(num(s)?),
        };
        if l.lo == 0 || l.hi < l.lo {
            return Err(Error::Config(format!(
                "bad length {s:?}: want 1 <= LO <= HI"
            )));
        }
        Ok(l)
    }

    fn draw(&self, rng: &mut StdRng) -> u32 {
        rng.gen_range(self.lo..=self.hi)
    }
}

/// Where the prompts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Random words, about one token each in common tokenizers.
    Random { input: Lengths },
    /// One system prompt of `prefix` words shared by every request, then a
    /// random question of `input` words.
    SharedPrefix { prefix: u32, input: Lengths },
    /// One JSON object per line: `{"prompt": "..."}` or `{"messages":
    /// [...]}`, optionally with `"max_tokens"`.
    Jsonl(String),
    /// ShareGPT's JSON: `[{"conversations": [{"from": "human", "value":
    /// ...}, {"from": "gpt", "value": ...}]}]`; the first human turn is the
    /// prompt and the reply's length (about 4/3 tokens per word) the output.
    ShareGpt(String),
}

/// Common English words: each is a single token (with its leading space) in
/// Llama, Mistral, Qwen2, GPT-2 and SmolLM vocabularies, so a prompt of N
/// words is close to N tokens. The server's `usage` gives the true count.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
    "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state", "family",
    "water", "house", "light", "land", "city", "king", "name", "word", "good", "great", "small",
    "long", "old", "new", "first", "last", "make", "know", "take", "see", "come", "think", "look",
    "want", "give", "use", "find", "tell", "ask", "work", "call", "try", "feel", "leave", "put",
];

fn words(rng: &mut StdRng, n: u32) -> String {
    let mut s = String::new();
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
    }
    s
}

#[derive(Deserialize)]
struct JsonlLine {
    prompt: Option<String>,
    messages: Option<Vec<ChatMessage>>,
    max_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct ShareGptEntry {
    #[serde(default)]
    conversations: Vec<ShareGptTurn>,
}

#[derive(Deserialize)]
struct ShareGptTurn {
    from: String,
    value: String,
}

fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::Input {
        path: path.into(),
        message: e.to_string(),
    })
}

/// Output length when neither the flag nor the file says.
pub const DEFAULT_OUTPUT: Lengths = Lengths { lo: 128, hi: 128 };

/// Builds `count` items (files are cycled through when shorter). `output`,
/// when given, sets every item's output length; otherwise file items keep
/// theirs and the rest get [`DEFAULT_OUTPUT`].
pub fn build(
    source: &Source,
    output: Option<Lengths>,
    count: usize,
    seed: u64,
) -> Result<Vec<Item>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let fixed_output = output;
    let output = output.unwrap_or(DEFAULT_OUTPUT);
    let mut items = Vec::with_capacity(count);
    match source {
        Source::Random { input } => {
            for _ in 0..count {
                let n = input.draw(&mut rng);
                items.push(Item {
                    input: Input::Text {
                        system: None,
                        text: words(&mut rng, n),
                    },
                    output_tokens: output.draw(&mut rng),
                });
            }
        }
        Source::SharedPrefix { prefix, input } => {
            let system = words(&mut rng, *prefix);
            for _ in 0..count {
                let n = input.draw(&mut rng);
                items.push(Item {
                    input: Input::Text {
                        system: Some(system.clone()),
                        text: words(&mut rng, n),
                    },
                    output_tokens: output.draw(&mut rng),
                });
            }
        }
        Source::Jsonl(path) => {
            let text = read(path)?;
            let mut file = Vec::new();
            for (i, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let bad = |m: String| Error::Input {
                    path: path.clone(),
                    message: format!("line {}: {m}", i + 1),
                };
                let l: JsonlLine = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
                let input = match (l.prompt, l.messages) {
                    (Some(p), None) => Input::Text {
                        system: None,
                        text: p,
                    },
                    (None, Some(m)) if !m.is_empty() => Input::Messages(m),
                    _ => return Err(bad("want exactly one of \"prompt\" and \"messages\"".into())),
                };
                file.push((input, l.max_tokens));
            }
            cycle(&mut items, file, count, fixed_output, &mut rng, path)?;
        }
        Source::ShareGpt(path) => {
            let entries: Vec<ShareGptEntry> =
                serde_json::from_str(&read(path)?).map_err(|e| Error::Input {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            let mut file = Vec::new();
            for e in entries {
                let mut turns = e.conversations.iter();
                let Some(q) = turns.find(|t| t.from == "human" || t.from == "user") else {
                    continue;
                };
                let reply = turns
                    .next()
                    .map_or(0, |r| r.value.split_whitespace().count());
                // About 4/3 tokens per English word; at least a few tokens.
                let out = ((reply as f64 * 4.0 / 3.0).round() as u32).clamp(4, 2048);
                file.push((
                    Input::Text {
                        system: None,
                        text: q.value.clone(),
                    },
                    Some(out),
                ));
            }
            cycle(&mut items, file, count, fixed_output, &mut rng, path)?;
        }
    }
    Ok(items)
}

/// Fills `items` with `count` entries from `file`, in order, cycling; an
/// explicit `output` overrides the file's lengths.
fn cycle(
    items: &mut Vec<Item>,
    file: Vec<(Input, Option<u32>)>,
    count: usize,
    output: Option<Lengths>,
    rng: &mut StdRng,
    path: &str,
) -> Result<()> {
    if file.is_empty() {
        return Err(Error::Input {
            path: path.into(),
            message: "no usable prompts".into(),
        });
    }
    for (input, out) in file.into_iter().cycle().take(count) {
        let output_tokens = match (output, out) {
            (Some(o), _) => o.draw(rng),
            (None, Some(n)) => n,
            (None, None) => DEFAULT_OUTPUT.draw(rng),
        };
        items.push(Item {
            input,
            output_tokens,
        });
    }
    Ok(())
}

/// The settings every request shares.
#[derive(Debug, Clone, Default)]
pub struct Sampling {
    pub model: Option<String>,
    pub temperature: Option<f64>,
    /// Ask the server to generate exactly `max_tokens` (vLLM, llama-server
    /// and hasten accept `ignore_eos`).
    pub ignore_eos: bool,
    /// Ask for usage on every chunk (vLLM's `continuous_usage_stats`) so
    /// ITL is token-accurate.
    pub continuous_usage: bool,
}

impl Item {
    /// The streaming request for this item.
    pub fn request(&self, endpoint: Endpoint, s: &Sampling) -> hasten_client::Request {
        let mut sampling = hasten_protocol::Sampling {
            max_tokens: Some(self.output_tokens as i64),
            temperature: s.temperature,
            stream: Some(true),
            stream_options: Some(hasten_protocol::StreamOptions {
                include_usage: Some(true),
                continuous_usage_stats: s.continuous_usage.then_some(true),
            }),
            ..Default::default()
        };
        if s.ignore_eos {
            sampling.ignore_eos = Some(true);
        }
        let model = s.model.clone();
        match (endpoint, &self.input) {
            (Endpoint::Responses, input) => responses_request(model, input, &sampling).into(),
            (Endpoint::Chat, Input::Messages(m)) => ChatCompletionRequest {
                model,
                messages: m.clone(),
                sampling,
                ..Default::default()
            }
            .into(),
            (Endpoint::Chat, Input::Text { system, text }) => {
                hasten_client::Request::chat_with(model, system.as_deref(), text, sampling)
            }
            (Endpoint::Completions, input) => {
                let text = match input {
                    Input::Text { system, text } => match system {
                        Some(sys) => format!("{sys}\n\n{text}"),
                        None => text.clone(),
                    },
                    // A conversation sent to /v1/completions: its turns as text.
                    Input::Messages(m) => {
                        m.iter().map(message_text).collect::<Vec<_>>().join("\n\n")
                    }
                };
                CompletionRequest {
                    model,
                    prompt: Prompt::Text(text),
                    sampling,
                    ..Default::default()
                }
                .into()
            }
        }
    }
}

/// The Responses request for `input`: text with `instructions`, or a
/// conversation as message items. There is no per-event usage in the
/// Responses events, so ITL counts one token per text event.
fn responses_request(
    model: Option<String>,
    input: &Input,
    s: &hasten_protocol::Sampling,
) -> hasten_protocol::responses::ResponsesRequest {
    use hasten_protocol::responses::{self as r, ResponsesRequest};
    let (instructions, input) = match input {
        Input::Text { system, text } => (system.clone(), r::Input::Text(text.clone())),
        Input::Messages(m) => {
            let items = m
                .iter()
                .map(|m| {
                    r::Item::Message(r::MessageItem {
                        role: m.role.clone(),
                        content: r::MessageContent::Text(message_text(m)),
                        id: None,
                        status: None,
                    })
                })
                .collect();
            (None, r::Input::Items(items))
        }
    };
    let mut extra = hasten_protocol::Extra::new();
    if s.ignore_eos == Some(true) {
        extra.insert("ignore_eos".into(), serde_json::Value::Bool(true));
    }
    ResponsesRequest {
        model,
        input,
        instructions,
        tools: None,
        tool_choice: None,
        parallel_tool_calls: None,
        text: None,
        reasoning: None,
        max_output_tokens: s.max_tokens,
        temperature: s.temperature,
        top_p: None,
        stream: Some(true),
        store: Some(false),
        previous_response_id: None,
        background: None,
        metadata: None,
        user: None,
        extra,
    }
}

fn message_text(m: &ChatMessage) -> String {
    use hasten_protocol::chat::Content;
    match &m.content {
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Parts(p)) => p
            .iter()
            .filter_map(|p| p.text.clone())
            .collect::<Vec<_>>()
            .join(""),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_parse_and_refuse_nonsense() {
        assert_eq!(Lengths::parse("128").unwrap(), Lengths::fixed(128));
        assert_eq!(
            Lengths::parse("64..256").unwrap(),
            Lengths { lo: 64, hi: 256 }
        );
        for bad in ["0", "9..3", "x", "1..", ""] {
            assert!(Lengths::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn random_workloads_are_reproducible_and_sized() {
        let src = Source::Random {
            input: Lengths { lo: 10, hi: 20 },
        };
        let a = build(&src, Some(Lengths::fixed(7)), 50, 1).unwrap();
        assert_eq!(a, build(&src, Some(Lengths::fixed(7)), 50, 1).unwrap());
        assert_ne!(a, build(&src, Some(Lengths::fixed(7)), 50, 2).unwrap());
        for it in &a {
            let Input::Text { text, .. } = &it.input else {
                panic!()
            };
            let n = text.split(' ').count();
            assert!((10..=20).contains(&n), "{n}");
            assert_eq!(it.output_tokens, 7);
        }
    }

    #[test]
    fn shared_prefix_items_share_exactly_the_system_prompt() {
        let src = Source::SharedPrefix {
            prefix: 30,
            input: Lengths::fixed(5),
        };
        let items = build(&src, Some(Lengths::fixed(4)), 3, 0).unwrap();
        let sys: Vec<_> = items
            .iter()
            .map(|i| match &i.input {
                Input::Text { system, text } => (system.clone().unwrap(), text.clone()),
                _ => panic!(),
            })
            .collect();
        assert!(sys
            .iter()
            .all(|(s, _)| s == &sys[0].0 && s.split(' ').count() == 30));
        assert_ne!(sys[0].1, sys[1].1);
    }

    #[test]
    fn files_are_read_cycled_and_checked() {
        let dir = std::env::temp_dir().join(format!("hasten-bench-wl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let jl = dir.join("p.jsonl");
        std::fs::write(
            &jl,
            "{\"prompt\": \"hi\", \"max_tokens\": 3}\n\n{\"messages\": [{\"role\": \"user\", \"content\": \"yo\"}]}\n",
        )
        .unwrap();
        let items = build(&Source::Jsonl(jl.display().to_string()), None, 3, 0).unwrap();
        assert_eq!(
            items.iter().map(|i| i.output_tokens).collect::<Vec<_>>(),
            [3, 128, 3]
        );
        assert!(matches!(items[1].input, Input::Messages(_)));
        std::fs::write(&jl, "{\"prompt\": \"hi\"}\n{\"nope\": 1}\n").unwrap();
        let err = build(&Source::Jsonl(jl.display().to_string()), None, 3, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");

        let sg = dir.join("sg.json");
        std::fs::write(
            &sg,
            r#"[{"conversations": [{"from": "human", "value": "Why?"}, {"from": "gpt", "value": "one two three four five six"}]}, {"conversations": []}]"#,
        )
        .unwrap();
        let items = build(&Source::ShareGpt(sg.display().to_string()), None, 2, 0).unwrap();
        assert_eq!((items[0].output_tokens, items.len()), (8, 2));
        let items = build(
            &Source::ShareGpt(sg.display().to_string()),
            Some(Lengths::fixed(9)),
            1,
            0,
        )
        .unwrap();
        assert_eq!(items[0].output_tokens, 9);
        std::fs::remove_dir_all(&dir).ok();
    }
}
