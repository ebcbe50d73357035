//! Chat templates: Jinja sources from GGUF `tokenizer.chat_template` or
//! `tokenizer_config.json`, rendered with minijinja the way Hugging Face
//! `apply_chat_template` renders them with Python jinja2 (trim_blocks,
//! lstrip_blocks, Python string/dict methods, `raise_exception`,
//! `strftime_now`, `bos_token`/`eos_token`, `add_generation_prompt`).

use crate::{Error, Result};
use minijinja::{Environment, ErrorKind, Value};
use serde::Serialize;

/// One chat message as a template sees it, the way `transformers` passes
/// an OpenAI message: `content` already flattened to text (`None` for an
/// assistant turn that only calls tools), `tool_calls` with each call's
/// `function.arguments` as an object, `tool_call_id` and `name` on tool
/// results. Fields a message does not have are undefined in the template.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Message {
            role: role.to_owned(),
            content: Some(content.to_owned()),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }

    /// The text of the message (empty when it has none).
    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }
}

/// A compiled chat template and the special-token texts it refers to.
pub struct ChatTemplate {
    env: Environment<'static>,
    pub bos_token: String,
    pub eos_token: String,
    /// How this model writes tool calls, read from the template's text.
    pub tool_syntax: crate::output::ToolSyntax,
    /// The template knows thinking blocks (`<think>`).
    pub thinks: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .finish()
    }
}

/// Extra variables of a render (`chat_template_kwargs`).
pub type TemplateVars = serde_json::Map<String, serde_json::Value>;

/// The variables every render sets itself.
pub const RESERVED_VARS: [&str; 4] = [
    "messages",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

/// A plain template for models that ship none: `role: content` lines.
pub const FALLBACK_TEMPLATE: &str = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(fmt: String) -> String {
    // Templates use this for "today's date" lines; a fixed clock keeps prompts
    // (and prefix-cache keys) stable across a day, so format today's UTC date.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format_date(&fmt, y, m, d)
}

/// `fmt` with `%d %m %Y %B %b` replaced by the given date.
fn format_date(fmt: &str, y: i64, m: u32, d: u32) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month = MONTHS[(m - 1) as usize];
    fmt.replace("%d", &format!("{d:02}"))
        .replace("%m", &format!("{m:02}"))
        .replace("%Y", &y.to_string())
        .replace("%B", month)
        .replace("%b", &month[..3])
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `tojson` as `transformers` defines it for chat templates: Python's
/// `json.dumps` (`", "` and `": "` separators, or `","` with `indent`,
/// keys in their given order unless `sort_keys`, non-ASCII kept, nothing
/// HTML-escaped), not minijinja's compact, escaped HTML-safe form.
fn tojson(
    value: &Value,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let v = serde_json::to_value(value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    py_dump(&v, indent, sort_keys.unwrap_or(false), 0, &mut out);
    Ok(Value::from_safe_string(out))
}

/// Writes `v` as Python's `json.dumps(v, ensure_ascii=False, indent=…)`.
fn py_dump(
    v: &serde_json::Value,
    indent: Option<usize>,
    sort: bool,
    depth: usize,
    out: &mut String,
) {
    use serde_json::Value as J;
    let newline = |out: &mut String, d: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * d));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                py_dump(x, indent, sort, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(o) if !o.is_empty() => {
            let mut items: Vec<_> = o.iter().collect();
            if sort {
                items.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, x)) in items.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(": ");
                py_dump(x, indent, sort, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        J::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(0.0);
            // Python writes whole floats as `1.0`.
            if f.fract() == 0.0 && f.abs() < 1e16 {
                out.push_str(&format!("{f:.1}"));
            } else {
                out.push_str(&n.to_string());
            }
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A template error in one line: what and where (`{:#}` would add
/// minijinja's source excerpt, whose caret drawing can panic on spans that
/// end before they start, as a fuzzed template found).
fn describe(e: &minijinja::Error) -> String {
    e.to_string()
}

/// Template instructions one render may run: far above what any chat
/// template needs for the largest conversation a request body can hold
/// (tens per message), and about a second of CPU, so a template that loops
/// without end, or for ever on some input, stops with an error.
pub const RENDER_FUEL: u64 = 50_000_000;

impl ChatTemplate {
    /// Compiles `source`; syntax errors are reported here, not at render time.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(RENDER_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_owned())
            .map_err(|e| Error::Template(describe(&e)))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            tool_syntax: crate::output::ToolSyntax::detect(source),
            thinks: source.contains(crate::output::THINK_OPEN),
        })
    }

    /// Renders a conversation. Errors raised by the template itself (e.g.
    /// "roles must alternate") come back as [`Error::Template`] with its message.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, &TemplateVars::new())
    }

    /// [`ChatTemplate::render`] with extra template variables (a request's
    /// `chat_template_kwargs`, e.g. Qwen3's `enable_thinking`), as
    /// `apply_chat_template(**kwargs)` passes them. The four variables
    /// the renderer sets ([`RESERVED_VARS`]) cannot be overridden.
    pub fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        vars: &TemplateVars,
    ) -> Result<String> {
        if let Some(k) = RESERVED_VARS.iter().find(|k| vars.contains_key(**k)) {
            return Err(Error::Template(format!(
                "template variable {k:?} is set by the renderer, not by chat_template_kwargs"
            )));
        }
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| Error::Template(e.to_string()))?;
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
            ..Value::from_serialize(vars)
        };
        tmpl.render(ctx).map_err(|e| match e.kind() {
            ErrorKind::OutOfFuel => Error::Template(format!(
                "the chat template ran more than {RENDER_FUEL} instructions; stopped"
            )),
            ErrorKind::InvalidOperation => {
                Error::Template(e.detail().unwrap_or("template raised an error").to_owned())
            }
            _ => Error::Template(describe(&e)),
        })
    }

    /// Renders a conversation whose last message (the assistant's, so far)
    /// is to be continued: the prompt ends right after that message's text,
    /// with no end-of-turn after it. The text is kept exactly, trailing
    /// whitespace included, even where the template would trim it.
    pub fn render_continuing(&self, messages: &[Message]) -> Result<String> {
        self.render_continuing_with(messages, &TemplateVars::new())
    }

    /// [`ChatTemplate::render_continuing`] with extra template variables.
    pub fn render_continuing_with(
        &self,
        messages: &[Message],
        vars: &TemplateVars,
    ) -> Result<String> {
        // A marker no model text contains shows where the message ends.
        const MARK: &str = "\u{1}hasten-continue\u{1}";
        let mut msgs = messages.to_vec();
        let Some(last) = msgs.last_mut() else {
            return Err(Error::Template("no message to continue".into()));
        };
        last.content.get_or_insert_with(String::new).push_str(MARK);
        let text = self.render_with(&msgs, false, vars)?;
        match text.rfind(MARK) {
            Some(i) => Ok(text[..i].to_owned()),
            None => Err(Error::Template(
                "this chat template does not show the final message's text as given, so it cannot be continued".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN: &str = include_str!("../tests/golden/chat_templates.json");

    #[derive(serde::Deserialize)]
    struct Case {
        template: String,
        label: String,
        messages: Vec<Message>,
        add_generation_prompt: bool,
        #[serde(default)]
        kwargs: TemplateVars,
        expected: Option<String>,
        error: Option<String>,
    }

    #[test]
    fn a_template_that_loops_too_long_is_stopped() {
        let spin =
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        let t = ChatTemplate::new(spin, "", "").unwrap();
        let t0 = std::time::Instant::now();
        let e = t.render(&[Message::new("user", "hi")], true).unwrap_err();
        assert!(e.to_string().contains("instructions; stopped"), "{e}");
        eprintln!("stopped after {:?}", t0.elapsed());
        // A long but ordinary conversation renders well within the budget.
        let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
        let t = ChatTemplate::new(chatml, "", "").unwrap();
        let msgs = vec![Message::new("user", "x"); 200_000];
        assert!(t.render(&msgs, false).is_ok());
    }

    #[test]
    fn a_final_assistant_message_is_continued_without_its_end_of_turn() {
        let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let t = ChatTemplate::new(chatml, "", "").unwrap();
        let msgs = [
            Message::new("user", "hi"),
            Message::new("assistant", "Hello, wor"),
        ];
        assert_eq!(
            t.render_continuing(&msgs).unwrap(),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello, wor"
        );
        let trims = "{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}</s>{% endfor %}";
        let t = ChatTemplate::new(trims, "", "").unwrap();
        let msgs = [
            Message::new("user", "hi"),
            Message::new("assistant", "Hello "),
        ];
        assert_eq!(
            t.render_continuing(&msgs).unwrap(),
            "[user] hi</s>[assistant] Hello "
        );
        let hides = "{% for m in messages %}{{ m.role }}{% endfor %}";
        let t = ChatTemplate::new(hides, "", "").unwrap();
        assert!(t.render_continuing(&msgs).is_err());
    }

    #[test]
    fn renders_every_shared_template_like_jinja2() {
        let dirs = [
            crate::tokenizer::tests::testdata().join("chat-templates"),
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chat-templates"),
        ];
        let cases: Vec<Case> = serde_json::from_str(GOLDEN).unwrap();
        assert!(cases.len() >= 30);
        assert!(cases
            .iter()
            .any(|c| c.template.contains("Qwen3") && !c.kwargs.is_empty()));
        let mut failures = Vec::new();
        for c in &cases {
            let path = dirs
                .iter()
                .map(|d| d.join(&c.template))
                .find(|p| p.exists());
            let src = std::fs::read_to_string(path.expect("template file")).unwrap();
            let mut t = ChatTemplate::new(&src, "<s>", "</s>").unwrap();
            // The goldens' clock (chat_goldens.py): 2026-01-02.
            t.env
                .add_function("strftime_now", |f: String| format_date(&f, 2026, 1, 2));
            let got = t.render_with(&c.messages, c.add_generation_prompt, &c.kwargs);
            match (&c.expected, &c.error, got) {
                (Some(want), _, Ok(got)) if *want == got => {}
                (_, Some(want), Err(Error::Template(got))) if got.contains(want.as_str()) => {}
                (want, err, got) => failures.push(format!(
                    "{} / {}:\n want {want:?} {err:?}\n got  {got:?}",
                    c.template, c.label
                )),
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn syntax_errors_surface_at_load() {
        assert!(matches!(
            ChatTemplate::new("{% if %}", "", ""),
            Err(Error::Template(_))
        ));
    }

    #[test]
    fn fallback_template_renders() {
        let t = ChatTemplate::new(FALLBACK_TEMPLATE, "", "").unwrap();
        let s = t.render(&[Message::new("user", "hi")], true).unwrap();
        assert_eq!(s, "user: hi\nassistant:");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }
}
