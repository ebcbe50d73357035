//! `hasten_model::perplexity` against llama.cpp's `llama-perplexity` on
//! the shipped default model: the same chunking, BOS and scored half give
//! the same figure (golden: tools/goldens/perplexity_golden.py), with an
//! f16 and a Q8_0 KV cache.

use hasten_kernels::attention::KvType;
use hasten_kernels::threads::Threads;
use hasten_model::loader::load;
use hasten_model::perplexity::perplexity;
use serde_json::Value;

const GOLDEN: &str = include_str!("../golden/perplexity.json");
const TEXT: &str = include_str!("../data/kjv-genesis-1.txt");

#[test]
fn perplexity_matches_llama_perplexity() {
    let g: Value = serde_json::from_str(GOLDEN).unwrap();
    let ctx = g["ctx"].as_u64().unwrap() as usize;
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/assets/hasten-default.gguf");
    let lm = load(&path).unwrap();
    let tok = &lm.tokenizer;
    let tokens = tok.encode(TEXT, tok.add_bos, false).unwrap();
    let bos = tok.bos.filter(|_| tok.add_bos);
    for (name, kv) in [("f16", KvType::F16), ("q8_0", KvType::Q8_0)] {
        let want = &g["runs"][name];
        let mut seen = 0;
        let p = perplexity(
            &lm.model,
            &tokens,
            ctx,
            bos,
            kv,
            Threads::new(2).unwrap(),
            |i, _, _| {
                seen = i;
            },
        )
        .unwrap();
        eprintln!(
            "{name}: hasten {:.4} +/- {:.4}, llama.cpp {want}",
            p.ppl, p.ppl_err
        );
        assert_eq!(p.chunks as u64, want["chunks"].as_u64().unwrap(), "{name}");
        assert_eq!(seen, p.chunks);
        assert_eq!(p.scored, p.chunks * (ctx - 1 - ctx / 2));
        let (ppl, err) = (want["ppl"].as_f64().unwrap(), want["err"].as_f64().unwrap());
        assert!(
            (p.ppl / ppl - 1.0).abs() < 0.002,
            "{name}: {} vs {ppl}",
            p.ppl
        );
        assert!(
            (p.ppl_err / err - 1.0).abs() < 0.02,
            "{name}: ± {} vs {err}",
            p.ppl_err
        );
    }
}
