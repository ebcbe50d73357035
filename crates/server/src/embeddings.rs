//! `POST /v1/embeddings`: texts or token lists, tokenized as completions
//! are, embedded by [`hasten_model::embed`] on the blocking pool (the
//! model's batched forward beside the engine's work; the thread pool
//! serializes their regions), as floats or base64.

use crate::error::{Error, Result};
use crate::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use hasten_model::embed::{embed, truncate, Pooling};
use hasten_protocol::{EmbeddingInput, EmbeddingRequest};
use serde_json::{json, Value};

/// Inputs accepted in one request (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

pub async fn embeddings(
    State(st): State<AppState>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: EmbeddingRequest = crate::routes::parse(body, st.body_limit())?;
    let b = st.backend()?;
    crate::routes::check_model(&b, req.model.as_deref())?;
    if let Some((k, _)) = req.extra.iter().next() {
        return Err(Error::bad(
            format!("{k}: not a field of an embeddings request"),
            k,
        ));
    }
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(f) => {
            return Err(Error::bad(
                format!("encoding_format: {f:?} is not float or base64"),
                "encoding_format",
            ))
        }
    };
    let dim = b.engine.model().config.dim;
    let dims = match req.dimensions {
        None => dim,
        Some(d) if d >= 1 && d as usize <= dim => d as usize,
        Some(d) => {
            return Err(Error::bad(
                format!("dimensions: {d} is outside 1..={dim}"),
                "dimensions",
            ))
        }
    };
    let b2 = b.clone();
    let threads = b.engine.config().threads;
    let (vectors, tokens) = tokio::task::spawn_blocking(move || -> Result<(Vec<Vec<f32>>, u64)> {
        let tok = &b2.tokenizer;
        let texts = |v: Vec<String>| -> Result<Vec<Vec<u32>>> {
            v.iter()
                .enumerate()
                .map(|(i, t)| {
                    if t.is_empty() {
                        return Err(Error::bad(format!("input[{i}]: an empty string"), "input"));
                    }
                    tok.encode(t, tok.add_bos, false)
                        .map_err(|e| Error::Internal(e.to_string()))
                })
                .collect()
        };
        let inputs = match req.input {
            EmbeddingInput::Text(t) => texts(vec![t])?,
            EmbeddingInput::Texts(v) => texts(v)?,
            EmbeddingInput::Tokens(t) => vec![t],
            EmbeddingInput::TokenLists(v) => v,
        };
        if inputs.is_empty() || inputs.len() > MAX_INPUTS {
            return Err(Error::bad(
                format!(
                    "input: {} inputs; 1 to {MAX_INPUTS} are allowed",
                    inputs.len()
                ),
                "input",
            ));
        }
        let model = b2.engine.model().clone();
        let (vocab, ctx) = (model.config.vocab_size, model.config.context_length);
        for (i, t) in inputs.iter().enumerate() {
            if t.is_empty() {
                return Err(Error::bad(format!("input[{i}]: no tokens"), "input"));
            }
            if t.len() > ctx {
                return Err(Error::bad(
                    format!(
                        "input[{i}]: {} tokens, more than the context of {ctx}",
                        t.len()
                    ),
                    "input",
                ));
            }
            if let Some(bad) = t.iter().find(|&&x| x as usize >= vocab) {
                return Err(Error::bad(
                    format!("input[{i}]: token {bad} is outside the vocabulary of {vocab}"),
                    "input",
                ));
            }
        }
        let n = inputs.iter().map(|t| t.len() as u64).sum();
        let v = embed(&model, &inputs, Pooling::of(&model), threads)
            .map_err(|e| Error::Internal(e.to_string()))?;
        Ok((v, n))
    })
    .await
    .map_err(|e| Error::Internal(format!("embedding task failed: {e}")))??;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let v = if dims < v.len() {
                truncate(v, dims)
            } else {
                v.clone()
            };
            let e = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": e})
        })
        .collect();
    Ok(Json(json!({
        "object": "list", "data": data, "model": b.model_id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}
