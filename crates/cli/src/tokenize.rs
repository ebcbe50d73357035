//! `hasten tokenize`: text to token ids with a model's (or a vocab-only
//! GGUF's) tokenizer.

use anyhow::{Context, Result};
use hasten_model::gguf::GgufFile;
use hasten_model::tokenizer::Tokenizer;
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file (vocab-only files work), a directory with
    /// tokenizer.json, or hf:OWNER/REPO (default: the built-in demo model).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Do not prepend the BOS token.
    #[arg(long)]
    no_bos: bool,
    /// Print each token's id and vocabulary text, one per line.
    #[arg(long)]
    pieces: bool,
    /// Turn control-token text such as `<|im_start|>` into the token.
    #[arg(long)]
    parse_special: bool,
    /// The text; read from stdin when absent.
    text: Option<String>,
}

pub fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    if path.is_dir() {
        let json = std::fs::read_to_string(path.join("tokenizer.json"))
            .with_context(|| format!("reading {}/tokenizer.json", path.display()))?;
        return Ok(Tokenizer::from_hf_json(&json, None, &[], false)?);
    }
    let f = GgufFile::open(path)?;
    Ok(Tokenizer::from_gguf(&f.header, &f.name)?)
}

pub fn main(a: Args) -> Result<()> {
    let (path, _) = crate::models::resolve(a.model.as_deref())?;
    let tok = load_tokenizer(&path)?;
    let text = match a.text {
        Some(t) => t,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading stdin")?;
            s
        }
    };
    let ids = tok.encode(&text, tok.add_bos && !a.no_bos, a.parse_special)?;
    if a.pieces {
        for id in ids {
            println!("{id}\t{:?}", tok.piece(id));
        }
    } else {
        println!(
            "{}",
            ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
        );
    }
    Ok(())
}
