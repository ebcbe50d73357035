//! A small mutational fuzzer for the parsers that take outside input
//! (GGUF, safetensors, `tokenizer.json`, chat templates here; request
//! bodies in the server; SSE in the client). It runs on stable Rust inside
//! the ordinary test suite: seeded, bounded, and reproducible, with no
//! coverage guidance (a longer campaign is `HASTEN_FUZZ_ITERS=1000000`).
//!
//! Each target's corpus (committed under `fuzz/corpus/<target>/` at the
//! repository root) seeds the inputs; every iteration takes one, applies a
//! few random mutations (bit flips, boundary integers over 1/2/4/8-byte
//! fields, insertions, deletions, duplication, truncation, splices from
//! another input) and calls the target under `catch_unwind`. A panic writes
//! the input to `target/fuzz-crashes/` and fails the test, naming the file.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};

/// Iterations per target: `HASTEN_FUZZ_ITERS`, or `default`.
pub fn iterations(default: usize) -> usize {
    std::env::var("HASTEN_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The committed corpus of `target` (every file in `fuzz/corpus/<target>/`).
pub fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = repo_root().join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fuzz corpus {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect()
}

fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|p| p.join("fuzz/corpus").is_dir())
        .unwrap_or(here)
        .to_owned()
}

const INTERESTING: [u64; 10] = [
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 62,
    u64::MAX,
];

/// Applies 1 to 4 random mutations to `input`, using `others` for splices.
pub fn mutate(rng: &mut ChaCha8Rng, input: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        let len = b.len();
        match rng.gen_range(0..8) {
            0 if len > 0 => {
                let i = rng.gen_range(0..len);
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.gen_range(0..len);
                b[i] = rng.gen();
            }
            2 if len > 0 => {
                let width = [1usize, 2, 4, 8][rng.gen_range(0..4)];
                let i = rng.gen_range(0..len);
                let v = INTERESTING[rng.gen_range(0..INTERESTING.len())].to_le_bytes();
                let n = width.min(len - i);
                b[i..i + n].copy_from_slice(&v[..n]);
            }
            3 => {
                let i = rng.gen_range(0..=len);
                let n = rng.gen_range(1..=16);
                let fill: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                b.splice(i..i, fill);
            }
            4 if len > 0 => {
                let i = rng.gen_range(0..len);
                let n = rng.gen_range(1..=(len - i).min(64));
                b.drain(i..i + n);
            }
            5 if len > 0 => {
                let i = rng.gen_range(0..len);
                let n = rng.gen_range(1..=(len - i).min(64));
                let copy = b[i..i + n].to_vec();
                let at = rng.gen_range(0..=len);
                b.splice(at..at, copy);
            }
            6 => b.truncate(rng.gen_range(0..=len)),
            7 if !others.is_empty() => {
                let o = &others[rng.gen_range(0..others.len())];
                if !o.is_empty() {
                    let i = rng.gen_range(0..o.len());
                    let n = rng.gen_range(1..=(o.len() - i).min(256));
                    let at = rng.gen_range(0..=len);
                    b.splice(at..at, o[i..i + n].iter().copied());
                }
            }
            _ => {}
        }
    }
    b
}

/// Runs `target` on the corpus itself and then `iters` mutated inputs;
/// panics (after saving the input) if the target panics on any.
pub fn run(name: &str, seeds: &[Vec<u8>], iters: usize, mut target: impl FnMut(&[u8])) {
    assert!(!seeds.is_empty(), "fuzz target {name} has no corpus");
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed ^ name.len() as u64);
    let mut n = 0u64;
    let mut check = |input: &[u8]| {
        n += 1;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target(input)));
        if r.is_err() {
            let dir = repo_root().join("target/fuzz-crashes");
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{name}-{n}.bin"));
            let _ = std::fs::write(&file, input);
            panic!(
                "fuzz target {name} panicked; input saved to {}",
                file.display()
            );
        }
    };
    for s in seeds {
        check(s);
    }
    for _ in 0..iters {
        let seed = &seeds[rng.gen_range(0..seeds.len())];
        let input = mutate(&mut rng, seed, seeds);
        check(&input);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_change_inputs_and_are_reproducible() {
        let seeds = vec![b"hello world".to_vec(), vec![0u8; 32]];
        let mut a = ChaCha8Rng::seed_from_u64(1);
        let mut b = ChaCha8Rng::seed_from_u64(1);
        let xs: Vec<_> = (0..50).map(|_| mutate(&mut a, &seeds[0], &seeds)).collect();
        let ys: Vec<_> = (0..50).map(|_| mutate(&mut b, &seeds[0], &seeds)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().filter(|x| **x != seeds[0]).count() > 40);
    }

    #[test]
    #[should_panic(expected = "fuzz target boom panicked")]
    fn a_panicking_target_fails_and_names_the_input() {
        run("boom", &[b"abc".to_vec()], 10, |b| assert!(b.len() < 3));
    }
}
