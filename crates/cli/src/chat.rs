//! `hasten chat`: an interactive chat with any OpenAI-compatible server.
//! Line editing and history (rustyline), multi-line input (end a line with
//! `\`), streaming output, the conversation kept across turns, Ctrl-C
//! stopping the current answer (the stream is dropped, so the server
//! cancels it) without leaving, and `/stats`, `/system`, `/reset`.

use crate::remote::{report, Gen, Remote};
use anyhow::{Context, Result};
use hasten_client::{Client, Output, Stats};
use hasten_protocol::chat::{ChatCompletionRequest, ChatMessage};
use rustyline::error::ReadlineError;
use std::io::Write;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    remote: Remote,
    #[command(flatten)]
    gen: Gen,
    /// The system message.
    #[arg(long)]
    system: Option<String>,
    /// Template variables sent with every request as
    /// `chat_template_kwargs`, a JSON object (e.g. '{"enable_thinking":
    /// false}' for Qwen3).
    #[arg(long, value_name = "JSON")]
    chat_template_kwargs: Option<String>,
}

const HELP: &str = "\
  /system TEXT   set the system message (/system alone shows it, /system - removes it)
  /reset         forget the conversation
  /stats         timings of the last answer
  /quit          leave (or Ctrl-D)
  End a line with \\ to continue on the next. Ctrl-C stops an answer.";

enum Ended {
    Done,
    Stopped,
    Failed(hasten_client::Error),
}

pub fn main(args: Args) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let kwargs = match &args.chat_template_kwargs {
        Some(j) => Some(serde_json::Value::Object(crate::template_kwargs(j)?)),
        None => None,
    };
    let client = args.remote.client()?;
    let model = rt.block_on(args.remote.model(&client));
    let mut rl = rustyline::DefaultEditor::new().context("starting the line editor")?;
    let mut system = args.system.clone();
    let mut turns: Vec<ChatMessage> = Vec::new();
    let mut last: Option<Stats> = None;
    // Piped input is a script: a failed answer makes the exit status 1.
    let scripted = !std::io::IsTerminal::is_terminal(&std::io::stdin());
    let mut failure: Option<String> = None;
    eprintln!(
        "hasten chat: {} ({}). /help for commands.",
        args.remote.endpoint.urls(),
        model.as_deref().unwrap_or("the server's model")
    );
    loop {
        let Some(input) = read_input(&mut rl)? else {
            break;
        };
        if input.trim().is_empty() {
            continue;
        }
        let _ = rl.add_history_entry(input.as_str());
        if let Some(cmd) = input.trim().strip_prefix('/') {
            let (name, rest) = cmd.split_once(' ').unwrap_or((cmd, ""));
            match name {
                "quit" | "exit" => break,
                "help" => println!("{HELP}"),
                "reset" => {
                    turns.clear();
                    println!("(conversation forgotten)");
                }
                "stats" => match &last {
                    Some(s) => print!("{}", report(s)),
                    None => println!("(no answer yet)"),
                },
                "system" => match rest.trim() {
                    "" => println!("{}", system.as_deref().unwrap_or("(no system message)")),
                    "-" => system = None,
                    s => system = Some(s.to_string()),
                },
                _ => println!("unknown command /{name}; /help lists them"),
            }
            continue;
        }
        turns.push(ChatMessage::new("user", &input));
        let mut messages = Vec::new();
        if let Some(s) = &system {
            messages.push(ChatMessage::new("system", s));
        }
        messages.extend(turns.iter().cloned());
        let mut req = ChatCompletionRequest {
            model: model.clone(),
            messages,
            sampling: args.gen.sampling(true),
            ..Default::default()
        };
        if let Some(k) = &kwargs {
            req.extra.insert("chat_template_kwargs".into(), k.clone());
        }
        let (out, ended) = rt.block_on(answer(&client, req));
        println!();
        let text = out.text().to_string();
        match ended {
            Ended::Done => {}
            Ended::Stopped => println!("[stopped]"),
            Ended::Failed(e) => {
                println!("[error: {e}]");
                if scripted {
                    failure = Some(e.to_string());
                }
            }
        }
        if text.is_empty() {
            // Nothing came back; forget the question so it can be asked again.
            turns.pop();
        } else {
            turns.push(ChatMessage::new("assistant", &text));
        }
        last = Some(out.stats);
    }
    match failure {
        Some(e) => anyhow::bail!("an answer failed: {e}"),
        None => Ok(()),
    }
}

/// One entry, joining lines that end in `\`; `None` at end of input.
fn read_input(rl: &mut rustyline::DefaultEditor) -> Result<Option<String>> {
    let mut text = String::new();
    let mut prompt = "> ";
    loop {
        match rl.readline(prompt) {
            Ok(line) => match line.strip_suffix('\\') {
                Some(head) => {
                    text.push_str(head);
                    text.push('\n');
                    prompt = "… ";
                }
                None => {
                    text.push_str(&line);
                    return Ok(Some(text));
                }
            },
            // Ctrl-C at the prompt clears the entry.
            Err(ReadlineError::Interrupted) => {
                text.clear();
                prompt = "> ";
            }
            Err(ReadlineError::Eof) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Streams one answer to stdout until it ends, fails, or Ctrl-C.
async fn answer(client: &Client, req: ChatCompletionRequest) -> (Output, Ended) {
    let mut s = client.stream(req);
    // While a line is edited the terminal is raw and Ctrl-C is a key
    // rustyline handles; while an answer streams it is SIGINT. rustyline
    // holds a SIGINT handler for the editor's life (so a Ctrl-C between
    // the two never kills us) until tokio's, installed at the first
    // answer's first poll, takes over for good. Listening is per answer,
    // so a Ctrl-C from an earlier turn cannot stop this one.
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    let mut stdout = std::io::stdout();
    loop {
        tokio::select! {
            r = s.next() => match r {
                Ok(Some(d)) => {
                    if d.choice == 0 {
                        let _ = stdout.write_all(d.text.as_bytes());
                        let _ = stdout.flush();
                    }
                }
                Ok(None) => return (s.output().clone(), Ended::Done),
                Err(e) => return (s.output().clone(), Ended::Failed(e)),
            },
            _ = &mut stop => {
                let out = s.output().clone();
                // Dropping the stream closes the connection: the server cancels.
                drop(s);
                return (out, Ended::Stopped);
            }
        }
    }
}
