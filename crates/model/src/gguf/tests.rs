//! GGUF parser tests: round trips through the writer, and every kind of
//! malformed header from the issue giving a named error instead of a panic.

use super::*;

fn sample() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::String("llama".into()))
        .kv("u8", Value::U8(7))
        .kv("i8", Value::I8(-7))
        .kv("u16", Value::U16(65535))
        .kv("i16", Value::I16(-300))
        .kv("u32", Value::U32(1 << 31))
        .kv("i32", Value::I32(-5))
        .kv("f32", Value::F32(1.5))
        .kv("bool", Value::Bool(true))
        .kv("u64", Value::U64(u64::MAX))
        .kv("i64", Value::I64(i64::MIN))
        .kv("f64", Value::F64(-2.25))
        .kv(
            "arr",
            Value::Array(vec![
                Value::Array(vec![Value::I32(1), Value::I32(2)]),
                Value::Array(vec![Value::I32(3)]),
            ]),
        )
        .kv(
            "strs",
            Value::Array(vec![Value::String("a".into()), Value::String("βγ".into())]),
        );
    w.tensor("a", &[32, 2], GgmlType::Q8_0, vec![1u8; 68]);
    w.tensor("b", &[3], GgmlType::F32, vec![2u8; 12]);
    w
}

#[test]
fn round_trips_every_value_type_and_tensor() {
    let w = sample();
    let f = GgufFile::from_bytes("t.gguf", w.to_bytes()).unwrap();
    let h = &f.header;
    assert_eq!(h.version, 3);
    for (k, v) in &w.metadata {
        assert_eq!(h.get(k), Some(v), "{k}");
    }
    let (info, data) = f.tensor_bytes("a").unwrap();
    assert_eq!(
        (info.dims.as_slice(), info.ty, data),
        (&[32usize, 2][..], GgmlType::Q8_0, &[1u8; 68][..])
    );
    let (_, data) = f.tensor_bytes("b").unwrap();
    assert_eq!(data, &[2u8; 12]);
    assert_eq!(h.data_offset % 32, 0);
}

#[test]
fn honours_general_alignment_and_version_2() {
    let mut w = sample();
    w.kv("general.alignment", Value::U32(64));
    let mut bytes = w.to_bytes();
    let f = GgufFile::from_bytes("t", bytes.clone()).unwrap();
    assert_eq!((f.header.alignment, f.header.data_offset % 64), (64, 0));
    assert_eq!(f.tensor_bytes("b").unwrap().1, &[2u8; 12]);
    bytes[4] = 2;
    assert_eq!(GgufFile::from_bytes("t", bytes).unwrap().header.version, 2);
}

fn err(bytes: Vec<u8>) -> String {
    GgufFile::from_bytes("bad.gguf", bytes)
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_magic_and_version() {
    let mut b = sample().to_bytes();
    b[0] = b'X';
    assert!(err(b).contains("not a GGUF file"));
    let mut b = sample().to_bytes();
    b[4] = 1;
    assert!(err(b).contains("version 1"));
}

#[test]
fn every_truncation_is_an_error() {
    let b = sample().to_bytes();
    let h = GgufFile::from_bytes("t", b.clone()).unwrap().header;
    let end = h.data_offset
        + h.tensors
            .iter()
            .map(|t| t.offset + t.n_bytes)
            .max()
            .unwrap();
    for len in 0..end {
        let e = err(b[..len].to_vec());
        assert!(e.starts_with("bad.gguf:"), "len {len}: {e}");
    }
}

#[test]
fn huge_counts_do_not_allocate() {
    let mut b = sample().to_bytes();
    b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(err(b).contains("tensor count"));
    let mut b = sample().to_bytes();
    b[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(err(b).contains("metadata count"));
    // First key's length: 4 GiB.
    let mut b = sample().to_bytes();
    b[24..32].copy_from_slice(&(4u64 << 30).to_le_bytes());
    assert!(err(b).contains("string length"));
}

#[test]
fn tensor_past_end_and_wrong_shape() {
    let mut w = GgufWriter::new();
    w.tensor("t", &[32], GgmlType::F32, vec![0u8; 64]);
    let b = w.to_bytes();
    assert!(err(b[..b.len() - 1].to_vec()).contains("extends past the end"));
    let mut w = GgufWriter::new();
    w.tensor("q", &[33], GgmlType::Q4_0, vec![0u8; 18]);
    assert!(err(w.to_bytes()).contains("not a multiple"));
}

#[test]
fn overlapping_tensors_are_named() {
    let mut w = GgufWriter::new();
    w.tensor("alpha", &[32], GgmlType::F32, vec![0u8; 128]);
    w.tensor("beta", &[3], GgmlType::F32, vec![0u8; 12]);
    let mut b = w.to_bytes();
    assert!(GgufFile::from_bytes("t", b.clone()).is_ok());
    // beta's offset field follows its name, dimension count, one dimension and type.
    let at = b.windows(4).position(|x| x == b"beta").unwrap() + 4 + 4 + 8 + 4;
    b[at..at + 8].copy_from_slice(&64u64.to_le_bytes());
    let e = err(b);
    assert!(
        e.contains("\"alpha\"") && e.contains("\"beta\"") && e.contains("overlap"),
        "{e}"
    );
}

#[test]
fn unsupported_type_names_tensor_and_type() {
    let mut w = GgufWriter::new();
    w.tensor(
        "blk.0.ffn_up.weight",
        &[256],
        GgmlType::F32,
        vec![0u8; 1024],
    );
    let mut b = w.to_bytes();
    // The type id follows name, n_dims and one dim.
    let pos = 24 + 8 + "blk.0.ffn_up.weight".len() + 4 + 8;
    b[pos..pos + 4].copy_from_slice(&16u32.to_le_bytes());
    let e = err(b);
    assert!(
        e.contains("blk.0.ffn_up.weight") && e.contains("IQ2_XXS"),
        "{e}"
    );
}

#[test]
fn invalid_utf8_names_the_key() {
    let mut w = GgufWriter::new();
    w.kv("general.name", Value::String("ab".into()));
    let mut b = w.to_bytes();
    let pos = 24 + 8 + "general.name".len() + 4 + 8;
    b[pos] = 0xff;
    let e = err(b);
    assert!(e.contains("general.name") && e.contains("UTF-8"), "{e}");
}

#[test]
fn deep_nesting_is_rejected() {
    let mut v = Value::U8(1);
    for _ in 0..20 {
        v = Value::Array(vec![v]);
    }
    let mut w = GgufWriter::new();
    w.kv("deep", v);
    assert!(err(w.to_bytes()).contains("nested"));
}
