//! Quantized KV caches on the shipped default model: Q8_0 keeps the f16
//! cache's greedy tokens wherever the f16 run's own top-two margin is
//! clear of the difference the cache makes, and changes perplexity by less
//! than 1%; Q4_0's perplexity is printed (`--nocapture`) and bounded.

use hasten_kernels::attention::KvType;
use hasten_kernels::threads::Threads;
use hasten_model::loader::{load, LoadedModel};
use hasten_model::perplexity::token_nll;
use hasten_model::sampler::argmax;
use hasten_model::session::Session;

/// KJV text (public domain). The default model was trained on the whole
/// KJV for 0.88 epochs, so this measures the cache's effect, not how well
/// the model generalizes.
const TEXT: &str = "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures: he leadeth me beside the still waters. He restoreth my soul: he leadeth me in the paths of righteousness for his name's sake. Yea, though I walk through the valley of the shadow of death, I will fear no evil: for thou art with me; thy rod and thy staff they comfort me. Thou preparest a table before me in the presence of mine enemies: thou anointest my head with oil; my cup runneth over. Surely goodness and mercy shall follow me all the days of my life: and I will dwell in the house of the LORD for ever.";

const PROMPTS: [&str; 4] = [
    "In the beginning God created",
    "And the LORD spake unto Moses, saying,",
    "<|user|>\nWho is my neighbour?<|end|>\n<|assistant|>\n",
    "Blessed are the poor in spirit:",
];

pub(crate) fn default_model() -> LoadedModel {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/assets/hasten-default.gguf");
    load(&path).unwrap()
}

/// Perplexity of `tokens` (each predicted from those before it), one
/// token fed at a time.
fn perplexity(lm: &LoadedModel, tokens: &[u32], ty: KvType) -> f64 {
    let mut s = Session::with_kv_type(&lm.model, tokens.len(), Threads::ONE, ty).unwrap();
    let mut nll = 0.0f64;
    let mut logits = s.feed(&tokens[..1]).unwrap();
    for &t in &tokens[1..] {
        nll += token_nll(&logits, t as usize);
        logits = s.feed(&[t]).unwrap();
    }
    (nll / (tokens.len() - 1) as f64).exp()
}

#[test]
fn q8_0_cache_keeps_perplexity_within_one_percent() {
    let lm = default_model();
    let tokens = lm.tokenizer.encode(TEXT, true, false).unwrap();
    assert!(tokens.len() > 100, "{} tokens", tokens.len());
    let f16 = perplexity(&lm, &tokens, KvType::F16);
    let q8 = perplexity(&lm, &tokens, KvType::Q8_0);
    let q4 = perplexity(&lm, &tokens, KvType::Q4_0);
    println!(
        "perplexity over {} tokens: f16 {f16:.4}, q8_0 {q8:.4} ({:+.3}%), q4_0 {q4:.4} ({:+.3}%)",
        tokens.len(),
        100.0 * (q8 / f16 - 1.0),
        100.0 * (q4 / f16 - 1.0)
    );
    assert!((q8 / f16 - 1.0).abs() < 0.01, "q8_0 {q8} vs f16 {f16}");
    assert!((q4 / f16 - 1.0).abs() < 0.10, "q4_0 {q4} vs f16 {f16}");
}

/// Along the f16 cache's greedy path (teacher-forced), the Q8_0 cache's
/// logits stay within 0.25 of the f16 cache's (0.16 at most measured),
/// and it picks the same token at every step whose f16 top-two margin
/// exceeds that tolerance (the rule of the llama.cpp golden tests).
#[test]
fn q8_0_cache_keeps_greedy_tokens_by_the_top_two_margin_rule() {
    let lm = default_model();
    let (mut compared, mut skipped) = (0, 0);
    let tol = 0.25f32;
    let mut worst = 0.0f32;
    for prompt in PROMPTS {
        let tokens = lm.tokenizer.encode(prompt, true, true).unwrap();
        let steps = 48;
        let new = |ty| Session::with_kv_type(&lm.model, tokens.len() + steps, Threads::ONE, ty);
        let (mut a, mut b) = (new(KvType::F16).unwrap(), new(KvType::Q8_0).unwrap());
        let (mut la, mut lb) = (a.feed(&tokens).unwrap(), b.feed(&tokens).unwrap());
        for step in 0..steps {
            let diff = la
                .iter()
                .zip(&lb)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            worst = worst.max(diff);
            assert!(
                diff < tol,
                "{prompt:?} step {step}: logits differ by {diff}"
            );
            let mut sorted = la.clone();
            sorted.sort_by(|x, y| y.total_cmp(x));
            let want = argmax(&la);
            if sorted[0] - sorted[1] > tol {
                assert_eq!(argmax(&lb), want, "{prompt:?} step {step}");
                compared += 1;
            } else {
                skipped += 1;
            }
            la = a.feed(&[want]).unwrap();
            lb = b.feed(&[want]).unwrap();
        }
    }
    println!(
        "{compared} steps compared, {skipped} within the margin; largest logit difference {worst}"
    );
    assert!(compared >= 100, "{compared} compared, {skipped} skipped");
}
