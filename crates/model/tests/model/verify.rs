//! A speculative verification pass gives each of its rows the logits a
//! decode step would, bit for bit: otherwise greedy output would depend on
//! which steps drafted (measured: the AVX-512 f16 attention used to pick
//! its scoring kernel by a tile's rows, so a decode step's three query
//! rows and a five-token verification's fifteen rounded differently).
//! Split-context decode (several threads, KV heads they do not divide)
//! merges pieces cut at the same positions in both. The AVX-512
//! integer tile over a Q8_0 or Q4_0 cache used to bound a row's V weights
//! by V scales at positions only later rows see, and tiles of more than
//! 64 rows took another softmax: both fixed (kernel test
//! `a_token_gets_the_same_bits_alone_and_in_a_tile`).

use hasten_kernels::attention::KvType;
use hasten_kernels::quant::GgmlType;
use hasten_kernels::threads::Threads;
use hasten_model::llama::Model;
use hasten_model::testing::{first_row_logits, load_fixture, Fixture};

/// Asserts `got` has `want`'s bits, value for value.
fn same_bits(want: &[f32], got: &[f32], what: &str) {
    let differ = want
        .iter()
        .zip(got)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(differ, 0, "{what}: {differ} logits differ");
}

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
        for ty in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            for plen in [7, 40, 200, 333, 400, 490] {
                let prompt: Vec<u32> = (0..plen as u32).map(|i| 3 + i * 7 % 200).collect();
                let drafts = [42u32, 55, 68, 81, 94, 107];
                let want = first_row(&model, ty, &prompt, &drafts[..1]);
                for rows in 2..=drafts.len() {
                    let got = first_row(&model, ty, &prompt, &drafts[..rows]);
                    same_bits(
                        &want,
                        &got,
                        &format!("{name} {ty:?} prompt {plen}, {rows} rows"),
                    );
                }
            }
        }
    }
}

/// Two threads on a model of one KV head: a decode step cuts its context
/// into pieces across the threads, and a verification's rows are cut at
/// the same positions (the process's span), so they still get a decode
/// step's bits, also where the drafts cross a cut (2,044 + 6 > 2,048).
#[test]
fn verification_rows_give_split_decode_steps_logits() {
    let fx = Fixture {
        n_kv_heads: 1,
        context_length: 4096,
        ..Fixture::tiny(GgmlType::Q8_0)
    };
    let model = load_fixture(&fx).unwrap().model;
    let two = Threads::new(2).unwrap();
    let span = hasten_kernels::attention_split::span_for(1, two);
    assert!(span.is_some_and(|s| s > 2044 && s < 2050), "{span:?}");
    for ty in [KvType::F16, KvType::Q8_0] {
        // Drafts at 2,044..2,050: on both sides of the cut (one prompt
        // length only: each pass prefills 2k tokens, a minute in CI).
        for plen in [2044] {
            let prompt: Vec<u32> = (0..plen as u32).map(|i| 3 + i * 7 % 200).collect();
            let drafts = [42u32, 55, 68, 81, 94, 107];
            let want = first_row_logits(&model, ty, &prompt, &drafts[..1], two).unwrap();
            for rows in 2..=drafts.len() {
                let got = first_row_logits(&model, ty, &prompt, &drafts[..rows], two).unwrap();
                same_bits(&want, &got, &format!("{ty:?} prompt {plen}, {rows} rows"));
            }
        }
    }
}
