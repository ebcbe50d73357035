//! Writing GGUF version 3 files: used by tests to build fixture models and
//! by `hasten synth` to make benchmark models without downloads.

use super::{type_id, Value, DEFAULT_ALIGNMENT, MAGIC};
use hasten_kernels::GgmlType;
use std::io::{self, Write};

/// Collects metadata and tensors, then writes them as one GGUF file.
#[derive(Debug, Default)]
pub struct GgufWriter {
    pub(crate) metadata: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<usize>, GgmlType, Vec<u8>)>,
    alignment: Option<usize>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata entry (`general.alignment` also sets the alignment).
    pub fn kv(&mut self, key: &str, value: Value) -> &mut Self {
        if key == "general.alignment" {
            self.alignment = value.as_u64().map(|a| a as usize);
        }
        self.metadata.push((key.to_owned(), value));
        self
    }

    /// Adds a tensor; `dims` in ggml order (row length first), `data` already
    /// encoded as `ty`.
    pub fn tensor(&mut self, name: &str, dims: &[usize], ty: GgmlType, data: Vec<u8>) -> &mut Self {
        self.tensors
            .push((name.to_owned(), dims.to_vec(), ty, data));
        self
    }

    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        let align = self.alignment.unwrap_or(DEFAULT_ALIGNMENT);
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut out, k);
            out.extend_from_slice(&v.type_id().to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        for (name, dims, ty, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            out.extend_from_slice(&(*ty as u32).to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += data.len().div_ceil(align) * align;
        }
        pad(&mut out, align);
        w.write_all(&out)?;
        for (_, _, _, data) in &self.tensors {
            w.write_all(data)?;
            let padding = data.len().div_ceil(align) * align - data.len();
            w.write_all(&vec![0u8; padding])?;
        }
        Ok(())
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v).expect("writing to a Vec cannot fail");
        v
    }
}

fn pad(out: &mut Vec<u8>, align: usize) {
    while !out.len().is_multiple_of(align) {
        out.push(0);
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_str(out, s),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Array(items) => {
            // An empty array's element type is unknowable; ggml writes u8 then.
            let elem = items.first().map_or(type_id::U8, Value::type_id);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for it in items {
                put_value(out, it);
            }
        }
    }
}
