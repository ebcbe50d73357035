//! Writing the trained model as GGUF (Q8_0 matrices, f32 norms, output tied
//! to the embeddings) and checking that hasten reads it as trained: the
//! same token ids as the `tokenizers` tokenizer, next-token logits close to
//! candle's, and a greedy sample through hasten's own forward pass.

use crate::corpus::CHAT_TEMPLATE;
use crate::model::{Model, Rope};
use crate::tok::{self, Tok};
use anyhow::{anyhow, ensure, Result};
use candle_core::{Tensor, Var};
use hasten_kernels::quant::quantize_row;
use hasten_kernels::threads::Threads;
use hasten_kernels::GgmlType;
use hasten_model::gguf::{GgufWriter, Value};
use hasten_model::sampler::argmax;
use hasten_model::session::Session;
use std::path::Path;

fn rows(v: &Var) -> Result<(Vec<f32>, Vec<usize>)> {
    let t = v.as_tensor();
    Ok((t.flatten_all()?.to_vec1::<f32>()?, t.dims().to_vec()))
}

fn add(w: &mut GgufWriter, name: &str, v: &Var) -> Result<()> {
    let (data, dims) = rows(v)?;
    if dims.len() == 1 {
        let bytes = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        w.tensor(name, &[dims[0]], GgmlType::F32, bytes);
        return Ok(());
    }
    let (out, inn) = (dims[0], dims[1]);
    let ty = GgmlType::Q8_0;
    let rb = ty.row_bytes(inn)?;
    let mut bytes = vec![0u8; rb * out];
    for (r, dst) in bytes.chunks_exact_mut(rb).enumerate() {
        quantize_row(ty, &data[r * inn..(r + 1) * inn], dst)?;
    }
    w.tensor(name, &[inn, out], ty, bytes);
    Ok(())
}

pub fn write(m: &Model, tk: &Tok, out: &Path) -> Result<()> {
    let s = m.shape;
    let mut w = GgufWriter::new();
    let u = |v: usize| Value::U32(v as u32);
    w.kv("general.architecture", Value::String("llama".into()))
        .kv(
            "general.name",
            Value::String("hasten-default (KJV demo)".into()),
        )
        .kv(
            "general.license",
            Value::String("MIT OR Apache-2.0 (weights); corpus public domain".into()),
        )
        .kv("llama.context_length", u(s.ctx))
        .kv("llama.embedding_length", u(s.dim))
        .kv("llama.block_count", u(s.layers))
        .kv("llama.feed_forward_length", u(s.ffn))
        .kv("llama.attention.head_count", u(s.heads))
        .kv("llama.attention.head_count_kv", u(s.heads))
        .kv("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
        .kv("llama.rope.freq_base", Value::F32(10000.0))
        .kv("llama.rope.dimension_count", u(s.head_dim()))
        .kv("llama.vocab_size", u(s.vocab));
    tok::gguf_keys(tk, &mut w, CHAT_TEMPLATE)?;
    add(&mut w, "token_embd.weight", &m.embed)?;
    add(&mut w, "output_norm.weight", &m.out_norm)?;
    for (i, l) in m.layers.iter().enumerate() {
        for (n, v) in [
            ("attn_norm", &l.attn_norm),
            ("attn_q", &l.wq),
            ("attn_k", &l.wk),
            ("attn_v", &l.wv),
            ("attn_output", &l.wo),
            ("ffn_norm", &l.ffn_norm),
            ("ffn_gate", &l.gate),
            ("ffn_up", &l.up),
            ("ffn_down", &l.down),
        ] {
            add(&mut w, &format!("blk.{i}.{n}.weight"), v)?;
        }
    }
    let tmp = out.with_extension("gguf.part");
    std::fs::write(&tmp, w.to_bytes())?;
    std::fs::rename(&tmp, out)?;
    Ok(())
}

pub fn check(m: &Model, rope: &Rope, tk: &Tok, out: &Path) -> Result<()> {
    let lm = hasten_model::loader::load(out)?;
    let samples = [
        "In the beginning God created the heaven and the earth.",
        "And Jesus answered and said unto them, Verily I say unto you!",
        "<|user|>\nWho made the stars?<|end|>\n<|assistant|>\n",
        "Numbers 12:3, naïve café — 1611 ½",
    ];
    for s in samples {
        let want = tk
            .encode(s, false)
            .map_err(|e| anyhow!("{e}"))?
            .get_ids()
            .to_vec();
        let got = lm.tokenizer.encode(s, false, true)?;
        ensure!(
            want == got,
            "tokenizers and hasten disagree on {s:?}: {want:?} vs {got:?}"
        );
    }
    eprintln!(
        "check: hasten tokenizes {} samples exactly as the trained tokenizer",
        samples.len()
    );
    let prompt = lm.tokenizer.encode(samples[0], false, true)?;
    let x = Tensor::from_vec(prompt.clone(), (1, prompt.len()), &candle_core::Device::Cpu)?;
    let logits = m.forward(&x, rope)?;
    let last = logits.get(prompt.len() - 1)?.to_vec1::<f32>()?;
    let mut sess = Session::new(&lm.model, 256, Threads::available());
    let ours = sess.feed(&prompt)?;
    let diff = last
        .iter()
        .zip(&ours)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let scale = last.iter().map(|a| a.abs()).fold(0f32, f32::max);
    eprintln!("check: next-token logits, max |candle f32 - hasten q8_0| = {diff:.4} (max |logit| {scale:.2}); argmax {} vs {}", argmax(&last), argmax(&ours));
    ensure!(
        diff < 0.05 * scale.max(1.0),
        "hasten's logits are too far from the trained model's"
    );
    // A greedy chat answer through hasten.
    let template = lm
        .template
        .as_ref()
        .ok_or_else(|| anyhow!("no chat template"))?;
    let text = template.render(
        &[hasten_model::chat::Message::new(
            "user",
            "Who made the heaven and the earth?",
        )],
        true,
    )?;
    let ids = lm.tokenizer.encode(&text, false, true)?;
    let mut sess = Session::new(&lm.model, 256, Threads::available());
    let mut logits = sess.feed(&ids)?;
    let mut outp = Vec::new();
    for _ in 0..60 {
        let t = argmax(&logits);
        if lm.tokenizer.is_eos(t) {
            break;
        }
        outp.push(t);
        logits = sess.feed(&[t])?;
    }
    eprintln!(
        "sample (greedy chat, \"Who made the heaven and the earth?\"): {}",
        lm.tokenizer.decode(&outp)
    );
    let size = std::fs::metadata(out)?.len();
    eprintln!("wrote {} ({:.1} MB)", out.display(), size as f64 / 1e6);
    Ok(())
}
