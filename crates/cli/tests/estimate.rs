//! `hasten estimate`: the figures the issue computes by hand, as JSON and
//! in the table, and clear errors for unknown names.

mod common;

use common::hasten;

#[test]
fn estimate_shows_the_work_and_the_json_matches() {
    let o = hasten(&["estimate", "--model", "llama-3-70b", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["estimate"]["kv_bytes_per_token"], 327680.0);
    assert_eq!(v["estimate"]["decode_first"]["bound"], "Memory");
    let o = hasten(&[
        "estimate",
        "--model",
        "gpt-3-175b",
        "--hardware",
        "h100-sxm",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("4.5000 MiB")
            && text.contains("2 × 96 layers × 96 KV heads × 128 × 16 bits / 8"),
        "{text}"
    );
    assert!(
        text.contains("TTFT") && text.contains("sequences that fit"),
        "{text}"
    );
    let o = hasten(&["estimate", "--model", "gpt-5"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("unknown model \"gpt-5\""),
        "{err}"
    );
}
