//! The disk tier on its own: round trips, restarts, foreign and damaged
//! files, the size cap.

use super::*;
use std::time::Duration;

fn id(model: u64) -> Identity {
    Identity {
        model,
        kv_type: 0,
        block_size: 4,
        n_layers: 2,
        n_kv_heads: 1,
        head_dim: 8,
        block_bytes: 4 * 2 * 2 * 8 * 2,
    }
}

fn payload(seed: u8) -> Vec<u8> {
    (0..id(0).block_bytes)
        .map(|i| (i as u8).wrapping_mul(seed))
        .collect()
}

/// Opens a tier over `dir` and a receiver of its loads.
fn open(dir: &Path, model: u64, max_bytes: u64) -> (DiskTier, mpsc::Receiver<Loaded>) {
    let (tx, rx) = mpsc::channel();
    let cfg = DiskCacheConfig {
        dir: dir.to_owned(),
        max_bytes,
    };
    let tier = DiskTier::open(&cfg, id(model), move |l| {
        let _ = tx.send(l);
    })
    .unwrap();
    (tier, rx)
}

fn load(tier: &DiskTier, rx: &mpsc::Receiver<Loaded>, chain: &[(u64, [u32; 4])]) -> Loaded {
    tier.load(7, chain.iter().map(|(h, t)| (*h, t.to_vec())).collect());
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

#[test]
fn blocks_written_are_loaded_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tier, rx) = open(dir.path(), 1, 1 << 20);
    tier.write(11, &[1, 2, 3, 4], payload(3));
    tier.write(12, &[5, 6, 7, 8], payload(5));
    let got = load(&tier, &rx, &[(11, [1, 2, 3, 4]), (12, [5, 6, 7, 8])]);
    assert_eq!(got.seq, 7);
    assert_eq!(got.blocks.len(), 2);
    assert_eq!(got.blocks[1].data, payload(5));
    tier.close();
    let (tier, rx) = open(dir.path(), 1, 1 << 20);
    assert!(tier.has(11, &[1, 2, 3, 4]));
    assert!(
        !tier.has(11, &[1, 2, 3, 5]),
        "tokens are checked, not just the hash"
    );
    assert_eq!(tier.stats().files, 2);
    let got = load(&tier, &rx, &[(11, [1, 2, 3, 4])]);
    assert_eq!(got.blocks[0].data, payload(3));
}

#[test]
fn another_models_files_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tier, _rx) = open(dir.path(), 1, 1 << 20);
    tier.write(11, &[1, 2, 3, 4], payload(3));
    tier.close();
    let (tier, _rx) = open(dir.path(), 2, 1 << 20);
    assert!(!tier.has(11, &[1, 2, 3, 4]));
    assert_eq!((tier.stats().files, tier.stats().rejected), (0, 1));
}

#[test]
fn altered_and_truncated_files_are_never_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tier, _rx) = open(dir.path(), 1, 1 << 20);
    tier.write(11, &[1, 2, 3, 4], payload(3));
    tier.write(12, &[5, 6, 7, 8], payload(5));
    tier.close();
    let path = |h: u64| dir.path().join(id(1).file_name(h));
    // One byte of the payload flipped: the header still reads well.
    let mut bytes = std::fs::read(path(11)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(path(11), &bytes).unwrap();
    // Cut short: found out at start.
    let bytes = std::fs::read(path(12)).unwrap();
    std::fs::write(path(12), &bytes[..bytes.len() - 10]).unwrap();
    let (tier, rx) = open(dir.path(), 1, 1 << 20);
    assert!(!tier.has(12, &[5, 6, 7, 8]), "truncated: not indexed");
    assert!(
        tier.has(11, &[1, 2, 3, 4]),
        "altered: looks fine until read"
    );
    let got = load(&tier, &rx, &[(11, [1, 2, 3, 4])]);
    assert!(got.blocks.is_empty());
    assert!(!tier.has(11, &[1, 2, 3, 4]));
    assert!(!path(11).exists(), "a bad file is removed");
    assert_eq!(tier.stats().rejected, 2);
}

#[test]
fn the_cap_removes_the_least_recently_used_files() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tier, rx) = open(dir.path(), 1, 1 << 20);
    tier.write(11, &[1, 2, 3, 4], payload(3));
    tier.write(12, &[5, 6, 7, 8], payload(5));
    let _ = load(&tier, &rx, &[(11, [1, 2, 3, 4])]); // 11 is now the newer
    tier.close();
    let one = tier.stats().bytes / 2;
    // Room for two: a third pushes out the least recently used (12).
    let (mut tier, _rx) = open(dir.path(), 1, 2 * one);
    tier.write(13, &[9, 9, 9, 9], payload(7));
    tier.close();
    assert!(tier.has(11, &[1, 2, 3, 4]));
    assert!(!tier.has(12, &[5, 6, 7, 8]));
    assert!(tier.has(13, &[9, 9, 9, 9]));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn a_queued_write_counts_as_held_and_a_failed_one_is_not_a_rejection() {
    let dir = tempfile::tempdir().unwrap();
    let (tier, rx) = open(dir.path(), 1, 1 << 20);
    // Held from the moment it is queued: a load queued after it finds it.
    tier.write(11, &[1, 2, 3, 4], payload(3));
    assert!(tier.has(11, &[1, 2, 3, 4]));
    assert!(!tier.has(11, &[1, 2, 3, 5]));
    // A payload of the wrong size is never written.
    tier.write(12, &[5, 6, 7, 8], vec![0; 3]);
    let got = load(&tier, &rx, &[(11, [1, 2, 3, 4]), (12, [5, 6, 7, 8])]);
    assert_eq!(got.blocks.len(), 1);
    assert_eq!(got.blocks[0].data, payload(3));
    assert!(
        !tier.has(12, &[5, 6, 7, 8]),
        "the failed write is forgotten"
    );
    let s = tier.stats();
    assert_eq!((s.files, s.written, s.rejected), (1, 1, 0));
}
