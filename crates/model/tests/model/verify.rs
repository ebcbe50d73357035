//! A speculative verification pass gives each of its rows the logits a
//! decode step would, bit for bit: otherwise greedy output would depend on
//! which steps drafted (measured: the AVX-512 f16 attention used to pick
//! its scoring kernel by a tile's rows, so a decode step's three query
//! rows and a five-token verification's fifteen rounded differently).
//! One thread: split-context decode (several threads, contexts of 512+)
//! merges pieces and is not bit-exact with an unsplit tile. Not yet true
//! either, so not asserted: the AVX-512 integer tile over a Q8_0 or Q4_0
//! cache (`avx512_attn.rs`, `avx512_attn_v.rs`) gives a row other bits
//! beside other rows (README, "missing").

use hasten_kernels::attention::KvType;
use hasten_kernels::quant::GgmlType;
use hasten_kernels::threads::Threads;
use hasten_model::llama::Model;
use hasten_model::testing::{first_row_logits, load_fixture, Fixture};

/// The first-row logits of feeding `toks` after `prompt`, one thread.
fn first_row(model: &Model, ty: KvType, prompt: &[u32], toks: &[u32]) -> Vec<f32> {
    first_row_logits(model, ty, prompt, toks, Threads::ONE).unwrap()
}

#[test]
fn verification_rows_give_the_decode_steps_logits() {
    for (name, model) in [
        (
            "tiny",
            load_fixture(&Fixture::tiny(GgmlType::Q8_0)).unwrap().model,
        ),
        ("default", super::kv_types::default_model().model),
    ] {
        let avx512 = hasten_kernels::cpu::kernels().isa >= hasten_kernels::cpu::Isa::Avx512;
        for ty in [KvType::F16, KvType::Q8_0] {
            for plen in [7, 40, 200, 333, 400, 490] {
                let prompt: Vec<u32> = (0..plen as u32).map(|i| 3 + i * 7 % 200).collect();
                let drafts = [42u32, 55, 68, 81, 94, 107];
                let want = first_row(&model, ty, &prompt, &drafts[..1]);
                for rows in 2..=drafts.len() {
                    let got = first_row(&model, ty, &prompt, &drafts[..rows]);
                    let differ = want
                        .iter()
                        .zip(&got)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    if avx512 && ty == KvType::Q8_0 {
                        if differ > 0 {
                            eprintln!(
                                "known: {name} {ty:?} prompt {plen}, {rows} rows: {differ} differ"
                            );
                        }
                        continue;
                    }
                    assert_eq!(differ, 0, "{name} {ty:?} prompt {plen}, {rows} rows");
                }
            }
        }
    }
}
