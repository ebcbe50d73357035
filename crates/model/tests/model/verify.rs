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

/// Asserts that each verification pass of 2..=`drafts.len()` of `drafts`
/// after `prompt` gives its first row the bits of a decode step (a pass
/// of one).
fn verification_is_decode(
    model: &Model,
    ty: KvType,
    prompt: &[u32],
    drafts: &[u32],
    threads: Threads,
    what: &str,
) {
    let passes: Vec<&[u32]> = (1..=drafts.len()).map(|n| &drafts[..n]).collect();
    let got = first_row_logits(model, ty, prompt, &passes, threads).unwrap();
    for (rows, g) in (2..).zip(&got[1..]) {
        same_bits(&got[0], g, &format!("{what}, {rows} rows"));
    }
}

#[test]
fn verification_rows_give_the_decode_steps_logits() {
    for (name, model) in [
        (
            "tiny",
            // F32 weights: Q8_0 ones quantize the activations, which
            // hides most differences in attention's last bits.
            load_fixture(&Fixture::tiny(GgmlType::F32)).unwrap().model,
        ),
        ("default", super::kv_types::default_model().model),
    ] {
        for ty in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            for plen in [7, 40, 200, 333, 400, 490] {
                let prompt: Vec<u32> = (0..plen as u32).map(|i| 3 + i * 7 % 200).collect();
                let drafts = [42u32, 55, 68, 81, 94, 107];
                let what = format!("{name} {ty:?} prompt {plen}");
                verification_is_decode(&model, ty, &prompt, &drafts, Threads::ONE, &what);
            }
        }
    }
}

/// Several threads on a model of one KV head: a decode step cuts its
/// context into pieces across the threads, and a verification's rows are
/// cut at the same positions (the process's span), whether its tiles'
/// pieces are spread over the threads too (few rows) or attended in turn
/// (on four threads, a pass of four), so they still get a decode step's
/// bits. The first row (the one compared) sees two pieces, and the drafts
/// cross the next cut, into a piece it does not see (2,044 + 6 > 2,048 on
/// four threads, span 1,024; 510 + 6 > 512 on sixteen, span 256).
#[test]
fn verification_rows_give_split_decode_steps_logits() {
    let fx = Fixture {
        n_kv_heads: 1,
        context_length: 4096,
        ..Fixture::tiny(GgmlType::F32)
    };
    let model = load_fixture(&fx).unwrap().model;
    for (threads, plen) in [(4, 2044), (16, 510)] {
        let th = Threads::new(threads).unwrap();
        let span = hasten_kernels::attention_split::span_for(1, th);
        assert!(
            span.is_some_and(|s| s < plen && 2 * s > plen && 2 * s < plen + 6),
            "{span:?}"
        );
        let prompt: Vec<u32> = (0..plen as u32).map(|i| 3 + i * 7 % 200).collect();
        for ty in [KvType::F16, KvType::Q8_0] {
            let what = format!("{threads} threads, {ty:?} prompt {plen}");
            verification_is_decode(&model, ty, &prompt, &[42, 55, 68, 81, 94, 107], th, &what);
        }
    }
}
