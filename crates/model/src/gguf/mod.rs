//! GGUF: parsing (versions 2 and 3) and writing.
//!
//! The parser reads the header from a byte slice (the memory-mapped file) with
//! bounds checks on every read; counts and lengths are checked against the
//! bytes that remain before anything is allocated, so a hostile header cannot
//! make it allocate more than the file's size. Tensor data is never copied:
//! [`GgufFile::tensor_bytes`] returns a slice of the map.

mod value;
mod writer;

pub use value::{type_id, Value};
pub use writer::GgufWriter;

use crate::mmap::{map_file, Bytes};
use crate::{Error, Result};
use hasten_kernels::GgmlType;
use std::collections::HashMap;
use std::path::Path;

pub const MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: usize = 32;
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: usize = 4;
/// Nesting limit for arrays of arrays, so crafted input cannot exhaust the stack.
const MAX_NESTING: usize = 8;

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the fastest-varying (row length).
    pub dims: Vec<usize>,
    pub ty: GgmlType,
    /// Offset from the start of the tensor data section.
    pub offset: usize,
    pub n_bytes: usize,
}

impl TensorInfo {
    pub fn n_elements(&self) -> usize {
        self.dims.iter().product()
    }
}

/// A parsed GGUF header: metadata and tensor directory.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    pub alignment: usize,
    /// Absolute offset of the tensor data section.
    pub data_offset: usize,
}

/// A GGUF file: its header plus the mapped bytes.
#[derive(Debug, Clone)]
pub struct GgufFile {
    pub name: String,
    pub header: GgufHeader,
    bytes: Bytes,
}

impl GgufFile {
    /// Maps and parses `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = map_file(path)?;
        let name = path.display().to_string();
        let header = GgufHeader::parse(bytes.as_slice(), &name)?;
        Ok(GgufFile {
            name,
            header,
            bytes,
        })
    }

    /// Parses an in-memory file (tests, fuzzing).
    pub fn from_bytes(name: &str, data: Vec<u8>) -> Result<Self> {
        let header = GgufHeader::parse(&data, name)?;
        Ok(GgufFile {
            name: name.to_owned(),
            header,
            bytes: Bytes::Owned(std::sync::Arc::new(data)),
        })
    }

    /// The file's bytes (shared; cloning is cheap).
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The data of tensor `name`, a slice of the map.
    pub fn tensor_bytes(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let info = self
            .header
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor {
                file: self.name.clone(),
                tensor: name.to_owned(),
            })?;
        let start = self.header.data_offset + info.offset;
        Ok((info, &self.bytes.as_slice()[start..start + info.n_bytes]))
    }
}

impl GgufHeader {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The type most of the per-layer matrices' bytes are stored in (what a
    /// file's quantization is called by: Q4_0 for a Q4_0 file whose
    /// embeddings are Q6_K), if it has per-layer matrices.
    pub fn dominant_matmul_type(&self) -> Option<GgmlType> {
        let mut by_type: Vec<(GgmlType, usize)> = Vec::new();
        for t in self
            .tensors
            .iter()
            .filter(|t| t.dims.len() == 2 && t.name.starts_with("blk."))
        {
            match by_type.iter_mut().find(|(ty, _)| *ty == t.ty) {
                Some((_, b)) => *b += t.n_bytes,
                None => by_type.push((t.ty, t.n_bytes)),
            }
        }
        by_type.iter().max_by_key(|(_, b)| *b).map(|(t, _)| *t)
    }

    /// Bits per weight over every tensor (bytes * 8 / elements), if any.
    pub fn bits_per_weight(&self) -> Option<f64> {
        let (bytes, elements) = self.tensors.iter().fold((0usize, 0usize), |(b, e), t| {
            (b + t.n_bytes, e + t.n_elements())
        });
        (elements > 0).then(|| bytes as f64 * 8.0 / elements as f64)
    }

    /// Parses the header of a whole GGUF file held in `data`. `file` names
    /// the source in errors. Tensor ranges are checked against `data.len()`.
    pub fn parse(data: &[u8], file: &str) -> Result<Self> {
        let mut r = Reader { data, pos: 0, file };
        let magic: [u8; 4] = r.take(4, "magic")?.try_into().unwrap_or([0; 4]);
        if magic != MAGIC {
            return Err(Error::BadMagic {
                file: file.to_owned(),
                magic,
            });
        }
        let version = r.u32("version")?;
        if version != 2 && version != 3 {
            return Err(Error::UnsupportedVersion {
                file: file.to_owned(),
                version,
            });
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        // Each metadata entry takes at least 8 (key len) + 4 (type) + 1 bytes,
        // each tensor entry at least 8 + 4 + 4 + 8 bytes.
        r.check_count(n_kv, 13, "metadata count")?;
        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut index = HashMap::with_capacity(n_kv as usize);
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let ty = r.u32(&format!("type of {key:?}"))?;
            let value = r.value(ty, &key, 0)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return Err(r.malformed(format!("duplicate metadata key {key:?}")));
            }
            metadata.push((key, value));
        }
        let alignment = match index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a as usize,
                _ => {
                    return Err(
                        r.malformed(format!("general.alignment {v:?} is not a power of two"))
                    )
                }
            },
        };
        r.check_count(n_tensors, 24, "tensor count")?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut tensor_index = HashMap::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let info = r.tensor_info(alignment)?;
            if tensor_index
                .insert(info.name.clone(), tensors.len())
                .is_some()
            {
                return Err(r.malformed(format!("duplicate tensor {:?}", info.name)));
            }
            tensors.push(info);
        }
        let data_offset = r.pos.div_ceil(alignment) * alignment;
        for t in &tensors {
            let end = data_offset
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.n_bytes));
            if end.is_none_or(|e| e > data.len()) {
                return Err(r.malformed(format!(
                    "tensor {:?} (offset {}, {} bytes) extends past the end of the file ({} bytes)",
                    t.name,
                    t.offset,
                    t.n_bytes,
                    data.len()
                )));
            }
        }
        // Tensors must not share bytes: one whose offset points into
        // another's data would load silently as garbage weights.
        let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
        by_offset.sort_by_key(|t| t.offset);
        for w in by_offset.windows(2) {
            let (a, b) = (w[0], w[1]);
            if a.offset + a.n_bytes > b.offset {
                return Err(r.malformed(format!(
                    "tensors {:?} (data bytes {}..{}) and {:?} (from {}) overlap",
                    a.name,
                    a.offset,
                    a.offset + a.n_bytes,
                    b.name,
                    b.offset
                )));
            }
        }
        Ok(GgufHeader {
            version,
            metadata,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }
}

/// A bounds-checked little-endian cursor.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    file: &'a str,
}

impl<'a> Reader<'a> {
    fn malformed(&self, what: String) -> Error {
        Error::Malformed {
            file: self.file.to_owned(),
            what,
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.data.len() - self.pos < n {
            return Err(Error::Truncated {
                file: self.file.to_owned(),
                what: what.to_owned(),
                offset: self.pos,
            });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// Rejects a count whose entries could not fit in the remaining bytes.
    fn check_count(&self, n: u64, min_entry_bytes: u64, what: &str) -> Result<()> {
        if n.saturating_mul(min_entry_bytes) > self.remaining() as u64 {
            return Err(self.malformed(format!(
                "{what} {n} cannot fit in the {} bytes that remain",
                self.remaining()
            )));
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn raw_string(&mut self, what: &str) -> Result<&'a [u8]> {
        let len = self.u64(what)?;
        if len > self.remaining() as u64 {
            return Err(self.malformed(format!(
                "{what}: string length {len} exceeds the {} bytes that remain",
                self.remaining()
            )));
        }
        self.take(len as usize, what)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let raw = self.raw_string(what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| Error::InvalidUtf8 {
            file: self.file.to_owned(),
            key: what.to_owned(),
        })
    }

    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<Value> {
        use type_id::*;
        Ok(match ty {
            U8 => Value::U8(self.array::<1>(key)?[0]),
            I8 => Value::I8(self.array::<1>(key)?[0] as i8),
            U16 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            I16 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            U32 => Value::U32(self.u32(key)?),
            I32 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            F32 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            BOOL => match self.array::<1>(key)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => {
                    return Err(self.malformed(format!("{key:?}: bool byte {b} is neither 0 nor 1")))
                }
            },
            STRING => Value::String(self.string(key)?),
            U64 => Value::U64(self.u64(key)?),
            I64 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            F64 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            ARRAY => {
                if depth >= MAX_NESTING {
                    return Err(
                        self.malformed(format!("{key:?}: arrays nested deeper than {MAX_NESTING}"))
                    );
                }
                let elem = self.u32(key)?;
                let n = self.u64(key)?;
                let min = match elem {
                    U8 | I8 | BOOL => 1,
                    U16 | I16 => 2,
                    U32 | I32 | F32 => 4,
                    U64 | I64 | F64 | STRING => 8,
                    ARRAY => 12,
                    t => {
                        return Err(
                            self.malformed(format!("{key:?}: unknown array element type {t}"))
                        )
                    }
                };
                self.check_count(n, min, &format!("{key:?}: array length"))?;
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    v.push(self.value(elem, key, depth + 1)?);
                }
                Value::Array(v)
            }
            t => return Err(self.malformed(format!("{key:?}: unknown value type {t}"))),
        })
    }

    fn tensor_info(&mut self, alignment: usize) -> Result<TensorInfo> {
        let name = self.string("tensor name")?;
        let n_dims = self.u32(&format!("dimension count of tensor {name:?}"))? as usize;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(self.malformed(format!(
                "tensor {name:?} has {n_dims} dimensions (1..={MAX_DIMS} allowed)"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            let d = self.u64(&format!("dimensions of tensor {name:?}"))?;
            dims.push(usize::try_from(d).map_err(|_| {
                self.malformed(format!("tensor {name:?}: dimension {d} too large"))
            })?);
        }
        let type_raw = self.u32(&format!("type of tensor {name:?}"))?;
        let offset = self.u64(&format!("offset of tensor {name:?}"))?;
        let ty = GgmlType::from_id(type_raw).map_err(|_| Error::UnsupportedTensorType {
            file: self.file.to_owned(),
            tensor: name.clone(),
            type_name: ggml_type_name(type_raw),
        })?;
        let n_elements = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let n_elements = n_elements
            .ok_or_else(|| self.malformed(format!("tensor {name:?}: element count overflows")))?;
        if dims[0] % ty.block_size() != 0 {
            return Err(self.malformed(format!(
                "tensor {name:?}: row length {} is not a multiple of the {} block size {}",
                dims[0],
                ty,
                ty.block_size()
            )));
        }
        let n_bytes = (n_elements / ty.block_size())
            .checked_mul(ty.block_bytes())
            .ok_or_else(|| self.malformed(format!("tensor {name:?}: byte size overflows")))?;
        let offset = usize::try_from(offset)
            .map_err(|_| self.malformed(format!("tensor {name:?}: offset too large")))?;
        if offset % alignment != 0 {
            return Err(self.malformed(format!(
                "tensor {name:?}: offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
            n_bytes,
        })
    }
}

/// ggml's name for a tensor type id, including the ones hasten rejects.
pub fn ggml_type_name(id: u32) -> String {
    const NAMES: [&str; 42] = [
        "F32",
        "F16",
        "Q4_0",
        "Q4_1",
        "Q4_2",
        "Q4_3",
        "Q5_0",
        "Q5_1",
        "Q8_0",
        "Q8_1",
        "Q2_K",
        "Q3_K",
        "Q4_K",
        "Q5_K",
        "Q6_K",
        "Q8_K",
        "IQ2_XXS",
        "IQ2_XS",
        "IQ3_XXS",
        "IQ1_S",
        "IQ4_NL",
        "IQ3_S",
        "IQ2_S",
        "IQ4_XS",
        "I8",
        "I16",
        "I32",
        "I64",
        "F64",
        "IQ1_M",
        "BF16",
        "Q4_0_4_4",
        "Q4_0_4_8",
        "Q4_0_8_8",
        "TQ1_0",
        "TQ2_0",
        "IQ4_NL_4_4",
        "IQ4_NL_4_8",
        "IQ4_NL_8_8",
        "MXFP4",
        "NVFP4",
        "?",
    ];
    match NAMES.get(id as usize) {
        Some(n) if *n != "?" => format!("{n} (id {id})"),
        _ => format!("unknown type id {id}"),
    }
}

#[cfg(test)]
mod tests;
