//! `hasten complete`: one request from arguments or stdin, for scripts.
//! The text goes to stdout as it streams; `--stats` reports where the time
//! went on stderr; `--json` prints one object instead. A failure after
//! output began keeps the text printed and exits 1. `--json-schema FILE`
//! asks for an answer matching the schema, checks it against the schema
//! here (the same compiler the server masks with), and prints the object
//! on one line, or fails saying where it stops matching.

use crate::remote::{report, Gen, Remote};
use anyhow::{bail, Context, Result};
use hasten_client::{Output, Request};
use hasten_protocol::completions::{CompletionRequest, Prompt};
use std::io::{Read, Write};

#[derive(clap::Args)]
pub struct Args {
    /// The prompt; read from stdin when absent.
    prompt: Vec<String>,
    #[command(flatten)]
    remote: Remote,
    #[command(flatten)]
    gen: Gen,
    /// Send the prompt as is to /v1/completions instead of as a chat message.
    #[arg(long)]
    raw: bool,
    /// The system message (chat).
    #[arg(long, conflicts_with = "raw")]
    system: Option<String>,
    /// One non-streaming request.
    #[arg(long)]
    no_stream: bool,
    /// Print where the time went to stderr.
    #[arg(long)]
    stats: bool,
    /// Print a JSON object (text, finish_reason, usage, stats) instead of the text.
    #[arg(long)]
    json: bool,
    /// Ask for a JSON answer matching the JSON Schema in this file
    /// (`response_format` json_schema, strict); the answer is checked
    /// against it and printed as one line of JSON.
    #[arg(long, value_name = "FILE")]
    json_schema: Option<std::path::PathBuf>,
}

pub fn main(args: Args) -> Result<()> {
    let prompt = if args.prompt.is_empty() {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        args.prompt.join(" ")
    };
    if prompt.is_empty() {
        bail!("no prompt: give one as arguments or on stdin");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(&args, prompt))
}

async fn run(args: &Args, prompt: String) -> Result<()> {
    let client = args.remote.client()?;
    let model = args.remote.model(&client).await;
    let stream = !args.no_stream;
    let sampling = args.gen.sampling(stream);
    let schema = match &args.json_schema {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("reading --json-schema {}", f.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", f.display()))?;
            let name = f
                .file_stem()
                .map_or("schema".into(), |s| s.to_string_lossy().into_owned());
            Some((name, v))
        }
        None => None,
    };
    let mut req: Request = if args.raw {
        CompletionRequest {
            model,
            prompt: Prompt::Text(prompt),
            sampling,
            ..Default::default()
        }
        .into()
    } else {
        Request::chat_with(model, args.system.as_deref(), &prompt, sampling)
    };
    if let Some((name, v)) = &schema {
        req = req.json_schema(name, v.clone());
    }
    // A structured answer is printed once checked, not as it streams.
    let echo = !args.json && schema.is_none();
    let mut stdout = std::io::stdout();
    let result = if stream {
        let mut s = client.stream(req);
        let r = loop {
            match s.next().await {
                Ok(Some(d)) if echo && d.choice == 0 => {
                    stdout.write_all(d.text.as_bytes())?;
                    stdout.flush()?;
                }
                Ok(Some(_)) => {}
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        (s.output().clone(), r)
    } else {
        match client.send(req).await {
            Ok(out) => {
                if echo {
                    stdout.write_all(out.text().as_bytes())?;
                }
                (out, Ok(()))
            }
            Err(e) => (Output::default(), Err(e)),
        }
    };
    let (out, r) = result;
    if let (Some((_, v)), Ok(())) = (&schema, &r) {
        let g = hasten_engine::constraint::Grammar::JsonSchema(v.clone());
        hasten_engine::constraint::check_text(&g, out.text()).map_err(|e| {
            anyhow::anyhow!("the answer does not match the schema: {e}\n{}", out.text())
        })?;
        let obj: serde_json::Value = serde_json::from_str(out.text())?;
        if !args.json {
            println!("{obj}");
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(&out, r.as_ref().err()))?
        );
    } else if echo && !out.text().ends_with('\n') && !out.text().is_empty() {
        println!();
    }
    if args.stats {
        eprint!("{}", report(&out.stats));
    }
    Ok(r?)
}

fn json(out: &Output, err: Option<&hasten_client::Error>) -> serde_json::Value {
    let s = &out.stats;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    serde_json::json!({
        "text": out.text(),
        "reasoning": out.choices.first().map(|c| c.reasoning.as_str()).filter(|r| !r.is_empty()),
        "tool_calls": out.choices.first().map(|c| &c.tool_calls).filter(|t| !t.is_empty()),
        "finish_reason": out.choices.first().and_then(|c| c.finish_reason.clone()),
        "usage": out.usage,
        "error": err.map(|e| e.to_string()),
        "stats": {
            "ttft_ms": s.ttft.map(ms),
            "tpot_ms": s.tpot().map(ms),
            "e2e_ms": ms(s.e2e),
            "itl_ms": s.itl.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "output_tokens": s.output_tokens,
            "attempts": s.attempts,
            "retries": s.retries,
            "hedges": s.hedges,
            "resumes": s.resumes,
            "continuations": s.continuations,
            "request_id": s.request_id,
            "server": s.server,
        },
    })
}
