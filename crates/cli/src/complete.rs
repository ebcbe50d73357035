//! `hasten complete`: one request from arguments or stdin, for scripts.
//! The text goes to stdout as it streams; `--stats` reports where the time
//! went on stderr; `--json` prints one object instead. A failure after
//! output began keeps the text printed and exits 1.

use crate::remote::{report, Gen, Remote};
use anyhow::{bail, Result};
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
    let req: Request = if args.raw {
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
    let mut stdout = std::io::stdout();
    let result = if stream {
        let mut s = client.stream(req);
        let r = loop {
            match s.next().await {
                Ok(Some(d)) if !args.json && d.choice == 0 => {
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
                if !args.json {
                    stdout.write_all(out.text().as_bytes())?;
                }
                (out, Ok(()))
            }
            Err(e) => (Output::default(), Err(e)),
        }
    };
    let (out, r) = result;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(&out, r.as_ref().err()))?
        );
    } else if !out.text().ends_with('\n') && !out.text().is_empty() {
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
