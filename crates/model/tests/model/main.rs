//! End-to-end model tests on generated fixtures: formats agree, batching
//! and chunking do not change results, and bad input is rejected cleanly.

use hasten_kernels::threads::Threads;
use hasten_kernels::GgmlType;
use hasten_model::config::{Arch, Config};
use hasten_model::gguf::GgufFile;
use hasten_model::kv::KvCache;
use hasten_model::llama::{Model, Naming, Scratch, SeqBatch};
use hasten_model::safetensors::SafetensorsDir;
use hasten_model::session::Session;
use hasten_model::testing::{Fixture, RopeScalingFx};
use std::path::PathBuf;

fn testdata() -> PathBuf {
    hasten_model::testing::testdata_dir()
}

pub(crate) fn vocab() -> PathBuf {
    testdata().join("tokenizer/ggml-vocab-llama-spm.gguf")
}

fn small(ty: GgmlType, arch: Arch) -> Fixture {
    Fixture {
        vocab_size: 32000,
        ..Fixture::tiny_arch(arch, ty)
    }
}

fn gguf_model(fx: &Fixture, dir: &tempfile::TempDir) -> Model {
    let path = dir.path().join("m.gguf");
    fx.write_gguf(&vocab(), &path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let c = Config::from_gguf(&f.header, &f.name, 32000).unwrap();
    Model::load(&f, c, Naming::Gguf).unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

const PROMPT: [u32; 9] = [1, 15043, 3186, 29892, 920, 526, 366, 29973, 13];

#[test]
fn safetensors_and_gguf_give_the_same_logits() {
    // Every family, and scaled RoPE (YaRN and Llama 3's factors, whose
    // GGUF and Hugging Face encodings differ: keys vs a tensor vs
    // `rope_scaling`).
    let scaled = [
        (Arch::Llama, "yarn:4"),
        (Arch::Qwen3, "yarn:8"),
        (Arch::Llama, "llama3:4"),
    ]
    .map(|(arch, s)| Fixture {
        rope_scaling: RopeScalingFx::parse(s),
        ..small(GgmlType::F32, arch)
    });
    let plain = Arch::ALL.map(|arch| small(GgmlType::F32, arch));
    for fx in plain.into_iter().chain(scaled) {
        let arch = (fx.arch, fx.rope_scaling);
        let dir = tempfile::tempdir().unwrap();
        let g = gguf_model(&fx, &dir);
        fx.write_safetensors(dir.path()).unwrap();
        let st = SafetensorsDir::open(dir.path()).unwrap();
        let c = Config::from_hf_json(
            &std::fs::read_to_string(dir.path().join("config.json")).unwrap(),
            "config.json",
        )
        .unwrap();
        let h = Model::load(&st, c, Naming::HuggingFace).unwrap();
        let t = Threads::new(2).unwrap();
        let a = Session::new(&g, 64, t).feed(&PROMPT).unwrap();
        let b = Session::new(&h, 64, t).feed(&PROMPT).unwrap();
        let d = max_diff(&a, &b);
        assert!(d < 1e-3, "{arch:?}: max logit difference {d}");
    }
}

#[test]
fn chunked_prefill_equals_token_by_token() {
    let fx = small(GgmlType::Q8_0, Arch::Llama);
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_model(&fx, &dir);
    let t = Threads::new(2).unwrap();
    let whole = Session::new(&m, 64, t).feed(&PROMPT).unwrap();
    let mut s = Session::new(&m, 64, t);
    let mut last = Vec::new();
    for tok in PROMPT {
        last = s.feed(&[tok]).unwrap();
    }
    assert!(max_diff(&whole, &last) < 1e-3);
}

/// Also for a mixture of experts, whose layers group the batch's tokens
/// by expert: sequences sharing experts must not leak into each other.
#[test]
fn a_batch_of_sequences_equals_each_alone() {
    for arch in [Arch::Qwen2, Arch::Qwen3Moe, Arch::Gemma3, Arch::Phi3] {
        batch_equals_alone(small(GgmlType::Q4_0, arch));
    }
}

fn batch_equals_alone(fx: Fixture) {
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_model(&fx, &dir);
    let t = Threads::new(2).unwrap();
    let c = &m.config;
    let (a, b) = (&PROMPT[..5], &PROMPT[2..9]);
    let alone_a = Session::new(&m, 64, t).feed(a).unwrap();
    let alone_b = Session::new(&m, 64, t).feed(b).unwrap();
    // Both in one forward, with interleaved, out-of-order block tables.
    let mut kv = KvCache::new(c, 8, 4);
    let mut s = Scratch::new(c, 32, 2);
    let batch = [
        SeqBatch {
            tokens: a,
            start_pos: 0,
            block_table: &[5, 1],
            local_table: &[],
            logits: 1,
        },
        SeqBatch {
            tokens: b,
            start_pos: 0,
            block_table: &[0, 7],
            local_table: &[],
            logits: 1,
        },
    ];
    let logits = m.forward(&batch, &mut kv, &mut s, t).unwrap().to_vec();
    let v = c.vocab_size;
    assert!(max_diff(&logits[..v], &alone_a) < 1e-3);
    assert!(max_diff(&logits[v..], &alone_b) < 1e-3);
    // A decode step for one and a prefill continuation for the other, together.
    let mut sa = Session::new(&m, 64, t);
    sa.feed(a).unwrap();
    let step_a = sa.feed(&[42]).unwrap();
    let batch = [SeqBatch {
        tokens: &[42],
        start_pos: 5,
        block_table: &[5, 1],
        local_table: &[],
        logits: 1,
    }];
    let got = m.forward(&batch, &mut kv, &mut s, t).unwrap().to_vec();
    assert!(max_diff(&got, &step_a) < 1e-3);
}

/// Logits for several last positions (a speculative verification pass)
/// equal the logits of feeding the same tokens one at a time, and a
/// sequence asking for none shares the pass.
#[test]
fn logits_of_every_verified_position_equal_one_at_a_time() {
    let fx = small(GgmlType::Q4_0, Arch::Llama);
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_model(&fx, &dir);
    let t = Threads::new(2).unwrap();
    let c = &m.config;
    let (ctx, drafted) = (&PROMPT[..4], &PROMPT[4..8]);
    let mut one = Session::new(&m, 64, t);
    one.feed(ctx).unwrap();
    let each: Vec<Vec<f32>> = drafted.iter().map(|&d| one.feed(&[d]).unwrap()).collect();
    let mut kv = KvCache::new(c, 8, 4);
    let mut s = Scratch::new(c, 32, 6);
    let prefill = [SeqBatch {
        tokens: ctx,
        start_pos: 0,
        block_table: &[3, 1],
        local_table: &[],
        logits: 0,
    }];
    assert!(m.forward(&prefill, &mut kv, &mut s, t).unwrap().is_empty());
    let verify = [
        SeqBatch {
            tokens: drafted,
            start_pos: 4,
            block_table: &[3, 1],
            local_table: &[],
            logits: drafted.len(),
        },
        SeqBatch {
            tokens: &PROMPT[..3],
            start_pos: 0,
            block_table: &[6],
            local_table: &[],
            logits: 0,
        },
    ];
    let got = m.forward(&verify, &mut kv, &mut s, t).unwrap().to_vec();
    let v = c.vocab_size;
    assert_eq!(got.len(), drafted.len() * v);
    for (i, want) in each.iter().enumerate() {
        assert!(
            max_diff(&got[i * v..(i + 1) * v], want) < 1e-3,
            "position {i}"
        );
    }
}

#[test]
fn bad_batches_are_errors_not_panics() {
    let fx = small(GgmlType::Q8_0, Arch::Llama);
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_model(&fx, &dir);
    let t = Threads::new(1).unwrap();
    let mut kv = KvCache::new(&m.config, 2, 4);
    let mut s = Scratch::new(&m.config, 8, 1);
    let cases: [(&[u32], usize, &[u32]); 4] = [
        (&[1, 2, 3, 4, 5], 0, &[0]), // table too short
        (&[1, 2], 0, &[9]),          // block outside the pool
        (&[40000], 0, &[0]),         // token outside the vocabulary
        (&[1; 9], 0, &[0, 1, 0]),    // more tokens than scratch holds
    ];
    for (tokens, start_pos, table) in cases {
        let batch = [SeqBatch {
            tokens,
            start_pos,
            block_table: table,
            local_table: &[],
            logits: 1,
        }];
        assert!(
            m.forward(&batch, &mut kv, &mut s, t).is_err(),
            "{tokens:?} {table:?}"
        );
    }
    let more_logits_than_tokens = [SeqBatch {
        tokens: &[1, 2],
        start_pos: 0,
        block_table: &[0],
        local_table: &[],
        logits: 3,
    }];
    assert!(m
        .forward(&more_logits_than_tokens, &mut kv, &mut s, t)
        .is_err());
    let mut sess = Session::new(&m, 4, t);
    let e = sess
        .feed(&[1, 2, 3, 4, 5])
        .expect_err("overflow is an error")
        .to_string();
    assert!(e.contains("context"), "{e}");
}

/// A windowed cache's sliding-window layers read `local_table`: one that
/// does not cover the new positions or names a block outside that pool
/// is an error, and a good one is accepted.
#[test]
fn a_windowed_cache_checks_the_local_table() {
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_model(&Fixture::tiny_gemma3(GgmlType::Q8_0), &dir);
    let t = Threads::new(1).unwrap();
    let ty = hasten_kernels::attention::KvType::F16;
    let mut kv = KvCache::windowed(&m.config, 4, Some(2), 4, ty).unwrap();
    assert_eq!(kv.local_blocks, Some(2));
    let mut s = Scratch::new(&m.config, 8, 1);
    let tables: [(&[u32], bool); 4] = [
        (&[], false),
        (&[0], false),
        (&[0, 2], false),
        (&[1, 0], true),
    ];
    for (local_table, ok) in tables {
        let batch = [SeqBatch {
            tokens: &PROMPT[..6],
            start_pos: 0,
            block_table: &[3, 2],
            local_table,
            logits: 1,
        }];
        let r = m.forward(&batch, &mut kv, &mut s, t);
        assert_eq!(r.is_ok(), ok, "{local_table:?}");
    }
}

#[test]
fn missing_tensor_and_wrong_shape_are_named() {
    use hasten_model::gguf::{GgufWriter, Value};
    let fx = small(GgmlType::F32, Arch::Llama);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    fx.write_gguf(&vocab(), &path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    // Rebuild the file without one tensor, and with another reshaped.
    let mut w = GgufWriter::new();
    for (k, v) in &f.header.metadata {
        w.kv(k, v.clone());
    }
    for t in &f.header.tensors {
        let (_, data) = f.tensor_bytes(&t.name).unwrap();
        match t.name.as_str() {
            "blk.1.ffn_up.weight" => {}
            _ => {
                w.tensor(&t.name, &t.dims, t.ty, data.to_vec());
            }
        }
    }
    let broken = GgufFile::from_bytes("broken.gguf", w.to_bytes()).unwrap();
    let c = Config::from_gguf(&broken.header, "broken.gguf", 32000).unwrap();
    let e = Model::load(&broken, c, Naming::Gguf)
        .expect_err("missing tensor is an error")
        .to_string();
    assert!(
        e.contains("blk.1.ffn_up.weight") && e.contains("broken.gguf"),
        "{e}"
    );
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::String("gpt-j".into()));
    let e = Config::from_gguf(
        &GgufFile::from_bytes("x.gguf", w.to_bytes()).unwrap().header,
        "x.gguf",
        1,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("gpt-j"), "{e}");

    // A zero in the shape names the key and the rule, never a struct dump.
    for (key, want) in [
        (
            "llama.attention.head_count",
            "attention.head_count (num_attention_heads) must be > 0",
        ),
        (
            "llama.block_count",
            "block_count (num_hidden_layers) must be > 0",
        ),
        (
            "llama.context_length",
            "context_length (max_position_embeddings) must be > 0",
        ),
    ] {
        let mut w = GgufWriter::new();
        for (k, v) in &f.header.metadata {
            let v = if k == key { Value::U32(0) } else { v.clone() };
            w.kv(k, v);
        }
        let h = GgufFile::from_bytes("zero.gguf", w.to_bytes())
            .unwrap()
            .header;
        let e = Config::from_gguf(&h, "zero.gguf", 32000)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want) && !e.contains("Config {"), "{key}: {e}");
    }
}

mod embed;
mod kv_types;
mod llama_cpp;
mod perplexity;
mod verify;

/// A checkpoint directory split in two shards, with tokenizer.json and a
/// chat template in tokenizer_config.json, loads through `loader::load` and
/// gives the same logits as the single-file GGUF of the same weights.
#[test]
fn sharded_hf_checkpoint_loads_end_to_end() {
    use hasten_model::tokenizer::Tokenizer;
    let fx = small(GgmlType::F32, Arch::Llama);
    let dir = tempfile::tempdir().unwrap();
    let g = gguf_model(&fx, &dir);
    let ck = dir.path().join("ck");
    std::fs::create_dir_all(&ck).unwrap();
    fx.write_safetensors(&ck).unwrap();
    std::fs::remove_file(ck.join("model.safetensors")).unwrap();
    let weights = fx.hf_weights();
    let mut index = serde_json::Map::new();
    let half = weights.len() / 2;
    for (shard, part) in [&weights[..half], &weights[half..]].iter().enumerate() {
        let file = format!("model-{:05}-of-00002.safetensors", shard + 1);
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = part
            .iter()
            .map(|(n, s, v)| {
                (
                    n.clone(),
                    s.clone(),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )
            })
            .collect();
        let views: Vec<_> = bytes
            .iter()
            .map(|(n, s, b)| {
                (
                    n.clone(),
                    safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                        .unwrap(),
                )
            })
            .collect();
        safetensors::tensor::serialize_to_file(views, &None, &ck.join(&file)).unwrap();
        for (n, _, _) in part.iter() {
            index.insert(n.clone(), serde_json::Value::String(file.clone()));
        }
    }
    std::fs::write(
        ck.join("model.safetensors.index.json"),
        serde_json::json!({ "weight_map": index }).to_string(),
    )
    .unwrap();
    let f = GgufFile::open(&vocab()).unwrap();
    let spm = Tokenizer::from_gguf(&f.header, &f.name).unwrap();
    std::fs::write(ck.join("tokenizer.json"), spm.to_hf_json().unwrap()).unwrap();
    let tc = serde_json::json!({
        "bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_bos_token": true,
        "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}",
    });
    std::fs::write(ck.join("tokenizer_config.json"), tc.to_string()).unwrap();

    let lm = hasten_model::loader::load(&ck).unwrap();
    assert_eq!(lm.tokenizer.bos, Some(1));
    assert_eq!(lm.tokenizer.eos, vec![2]);
    let prompt = lm
        .tokenizer
        .encode("Hello world, how are you?", true, false)
        .unwrap();
    assert_eq!(
        prompt,
        spm.encode("Hello world, how are you?", true, false)
            .unwrap()
    );
    let chat = lm
        .template
        .as_ref()
        .unwrap()
        .render(&[hasten_model::chat::Message::new("user", "hi")], true)
        .unwrap();
    assert_eq!(chat, "<s>[user] hi\n");
    let t = Threads::new(2).unwrap();
    let a = Session::new(&lm.model, 64, t).feed(&prompt).unwrap();
    let b = Session::new(&g, 64, t).feed(&prompt).unwrap();
    assert!(max_diff(&a, &b) < 1e-3);
    // A shard listed in the index but missing is an error naming it.
    std::fs::remove_file(ck.join("model-00002-of-00002.safetensors")).unwrap();
    let e = match hasten_model::loader::load(&ck) {
        Ok(_) => panic!("a missing shard must be an error"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
}

/// A `Gemma3ForConditionalGeneration` checkpoint (the 4B-27B Gemma 3
/// releases): the text model under `text_config` and
/// `language_model.model.*` tensors (older `transformers`) or
/// `model.language_model.*` (newer), beside a vision tower that is
/// skipped. It gives the text-only checkpoint's logits.
#[test]
fn a_gemma3_multimodal_checkpoint_runs_its_language_model() {
    let fx = small(GgmlType::F32, Arch::Gemma3);
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    fx.write_safetensors(&plain).unwrap();
    let load = |d: &std::path::Path| {
        let st = SafetensorsDir::open(d).unwrap();
        let json = std::fs::read_to_string(d.join("config.json")).unwrap();
        let c = Config::from_hf_json(&json, "config.json").unwrap();
        Model::load(&st, c, Naming::HuggingFace).unwrap()
    };
    let t = Threads::new(2).unwrap();
    let want = Session::new(&load(&plain), 64, t).feed(&PROMPT).unwrap();
    let mut text: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(plain.join("config.json")).unwrap()).unwrap();
    text["model_type"] = "gemma3_text".into();
    let wrapped = serde_json::json!({
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": text, "vision_config": {"model_type": "siglip_vision_model"},
    });
    for prefix in ["language_model.model.", "model.language_model."] {
        let mm = dir.path().join(prefix.replace('.', "_"));
        std::fs::create_dir_all(&mm).unwrap();
        std::fs::write(mm.join("config.json"), wrapped.to_string()).unwrap();
        let vision = vec![0u8; 8];
        let mut bytes: Vec<(String, Vec<usize>, Vec<u8>)> = fx
            .hf_weights()
            .into_iter()
            .map(|(n, s, v)| {
                let n = match n.strip_prefix("model.") {
                    Some(rest) => format!("{prefix}{rest}"),
                    None => format!("language_model.{n}"),
                };
                (n, s, v.iter().flat_map(|x| x.to_le_bytes()).collect())
            })
            .collect();
        bytes.push(("vision_tower.patch_embed.weight".into(), vec![2], vision));
        let views: Vec<_> = bytes
            .iter()
            .map(|(n, s, b)| {
                let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b);
                (n.clone(), v.unwrap())
            })
            .collect();
        safetensors::tensor::serialize_to_file(views, &None, &mm.join("model.safetensors"))
            .unwrap();
        let got = Session::new(&load(&mm), 64, t).feed(&PROMPT).unwrap();
        assert!(max_diff(&got, &want) < 1e-6, "{prefix}");
    }
}

/// `hasten synth --pattern`: with successors in cycles of 8 pulled hard
/// enough, the greedy continuation repeats every 8 tokens (the text a
/// speculative drafter can predict).
#[test]
fn a_planted_pattern_makes_greedy_output_periodic() {
    let fx = Fixture {
        cycle: Some(8),
        bigram: 2.0,
        ..small(GgmlType::Q8_0, Arch::Llama)
    };
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_model(&fx, &dir);
    let mut s = Session::new(&m, 64, Threads::new(1).unwrap());
    let mut logits = s.feed(&PROMPT[..3]).unwrap();
    let mut out = Vec::new();
    for _ in 0..40 {
        let t = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
            .unwrap();
        out.push(t);
        logits = s.feed(&[t]).unwrap();
    }
    assert!((8..40).all(|i| out[i] == out[i - 8]), "{out:?}");
    assert!(
        out[..8]
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len()
            == 8,
        "{out:?}"
    );
}

/// Decode over a long context with one KV head on sixteen threads (the
/// pool may have fewer: the cut depends on the count asked for, 256
/// positions here) cuts the context into pieces across the threads
/// (split-context attention); the logits equal those of one thread, which
/// attends unsplit (five pieces here: 1e-5 apart on the AMX Xeon). F32
/// weights: quantized ones quantize the activations too, where a
/// difference of one ulp can round a value to the next step and move a
/// logit by 0.05 (0.011-0.09 at 4,000 positions on two threads).
#[test]
fn split_context_decode_equals_one_thread() {
    let fx = Fixture {
        n_kv_heads: 1,
        context_length: 4096,
        ..small(GgmlType::F32, Arch::Llama)
    };
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_model(&fx, &dir);
    let prompt: Vec<u32> = (0..1100u32).map(|i| 3 + (i * 7919) % 31000).collect();
    let many = Threads::new(16).unwrap();
    let span = hasten_kernels::attention_split::span_for(1, many);
    assert!(span.is_some_and(|s| 4 * s < prompt.len()), "{span:?}");
    let mut split = Session::new(&m, 1200, many);
    let mut whole = Session::new(&m, 1200, Threads::ONE);
    split.feed(&prompt).unwrap();
    whole.feed(&prompt).unwrap();
    for tok in [17u32, 4242, 29871] {
        let (a, b) = (split.feed(&[tok]).unwrap(), whole.feed(&[tok]).unwrap());
        let d = max_diff(&a, &b);
        assert!(d < 1e-3, "max logit difference {d}");
    }
}

/// The parallel regions one decode step starts, as `hasten estimate
/// --measure` counts them for its fixed cost per step
/// ([`hasten_model::llama::decode_regions`]): a dense model's step, at a
/// short context (attention over whole KV heads) and a long one (split).
#[test]
fn a_decode_step_starts_the_regions_the_estimate_counts() {
    use hasten_kernels::threads::regions_run;
    for arch in [Arch::Llama, Arch::Qwen3, Arch::Gemma3] {
        let fx = Fixture {
            context_length: 2048,
            ..small(GgmlType::Q8_0, arch)
        };
        let dir = tempfile::tempdir().unwrap();
        let m = gguf_model(&fx, &dir);
        let two = Threads::new(2).unwrap();
        for ctx in [3, 1100] {
            let mut s = Session::new(&m, 1200, two);
            let prompt: Vec<u32> = (0..ctx).map(|i| 3 + (i * 7919) % 31000).collect();
            s.feed(&prompt).unwrap();
            let before = regions_run();
            s.feed(&[4]).unwrap();
            let n = regions_run() - before;
            assert_eq!(
                n,
                hasten_model::llama::decode_regions(m.config.n_layers),
                "{arch:?} at context {ctx}"
            );
        }
    }
}
