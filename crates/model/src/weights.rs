//! Tensors as slices of mapped files, and the sources that name them.

use crate::mmap::Bytes;
use crate::{Error, Result};
use hasten_kernels::matmul::WeightMatrix;
use hasten_kernels::quant::dequantize_row;
use hasten_kernels::GgmlType;

/// A tensor whose data stays in the mapped file.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub name: String,
    pub ty: GgmlType,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<usize>,
    bytes: Bytes,
    start: usize,
    len: usize,
    /// A copy in a layout the matmul kernels read faster (see [`Tensor::pack`]).
    packed: Option<std::sync::Arc<hasten_kernels::quant::repack::Aligned>>,
}

impl Tensor {
    /// `bytes[start..start + len]` must hold exactly the tensor's data;
    /// sources check this before constructing.
    pub(crate) fn new(
        name: String,
        ty: GgmlType,
        dims: Vec<usize>,
        bytes: Bytes,
        start: usize,
        len: usize,
    ) -> Self {
        Tensor {
            name,
            ty,
            dims,
            bytes,
            start,
            len,
            packed: None,
        }
    }

    /// Makes an interleaved copy of a Q4_0 or Q8_0 matrix for the eight-row kernels
    /// (same size as the weights; the mapped file is then no longer read).
    /// Other types and shapes stay as they are.
    pub fn pack(&mut self) {
        if self.dims.len() == 2 {
            let (rows, cols) = (self.dims[1], self.dims[0]);
            self.packed =
                hasten_kernels::quant::repack::repack_x8(self.ty, self.data(), rows, cols)
                    .map(std::sync::Arc::new);
        }
    }

    /// Slice `e` of a 3-D tensor `[cols, rows, n]` (one expert of a
    /// stacked mixture) as a 2-D tensor `[cols, rows]` over the same bytes.
    pub fn slice_3d(&self, e: usize) -> Result<Tensor> {
        let &[cols, rows, n] = self.dims.as_slice() else {
            return Err(Error::Malformed {
                file: self.name.clone(),
                what: format!("expected a 3-D tensor, got dims {:?}", self.dims),
            });
        };
        let bytes = self.ty.row_bytes(cols)? * rows;
        if e >= n || bytes * n != self.len {
            return Err(Error::Malformed {
                file: self.name.clone(),
                what: format!("slice {e} of {n} does not fit {} bytes", self.len),
            });
        }
        Ok(Tensor::new(
            format!("{}[{e}]", self.name),
            self.ty,
            vec![cols, rows],
            self.bytes.clone(),
            self.start + e * bytes,
            bytes,
        ))
    }

    /// Rows `r0..r0 + n` of a 2-D tensor as a tensor over the same bytes
    /// (one part of a fused matrix such as Phi-3's QKV).
    pub fn slice_rows(&self, r0: usize, n: usize, part: &str) -> Result<Tensor> {
        let &[cols, rows] = self.dims.as_slice() else {
            return Err(Error::Malformed {
                file: self.name.clone(),
                what: format!("expected a 2-D tensor, got dims {:?}", self.dims),
            });
        };
        let rb = self.ty.row_bytes(cols)?;
        if r0 + n > rows || rb * rows != self.len {
            return Err(Error::Malformed {
                file: self.name.clone(),
                what: format!(
                    "rows {r0}..{} of {rows} do not fit {} bytes",
                    r0 + n,
                    self.len
                ),
            });
        }
        Ok(Tensor::new(
            format!("{}[{part}]", self.name),
            self.ty,
            vec![cols, n],
            self.bytes.clone(),
            self.start + r0 * rb,
            n * rb,
        ))
    }

    pub fn data(&self) -> &[u8] {
        &self.bytes.as_slice()[self.start..self.start + self.len]
    }

    pub fn n_elements(&self) -> usize {
        self.dims.iter().product()
    }

    /// Views a 2-D tensor as `[rows = dims[1], cols = dims[0]]`.
    pub fn matrix(&self) -> Result<WeightMatrix<'_>> {
        let rows = self.dims.get(1).copied().unwrap_or(1);
        let m = WeightMatrix::new(self.ty, rows, self.dims[0], self.data())?;
        Ok(match &self.packed {
            Some(p) => m.with_packed(p)?,
            None => m,
        })
    }

    /// Dequantizes the whole tensor (norm weights, biases: small vectors).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.n_elements()];
        dequantize_row(self.ty, self.data(), &mut out)?;
        Ok(out)
    }
}

/// Something that hands out tensors by name: a GGUF file or a set of
/// safetensors shards.
pub trait TensorSource {
    /// The file (or directory) the tensors come from, for error messages.
    fn source_name(&self) -> &str;
    /// The tensor called `name`, if present.
    fn find(&self, name: &str) -> Option<Tensor>;

    fn get(&self, name: &str) -> Result<Tensor> {
        self.find(name).ok_or_else(|| Error::MissingTensor {
            file: self.source_name().to_owned(),
            tensor: name.to_owned(),
        })
    }

    /// The tensor, checked to have exactly `dims` (ggml order).
    fn get_shaped(&self, name: &str, dims: &[usize]) -> Result<Tensor> {
        let t = self.get(name)?;
        if t.dims != dims {
            return Err(Error::TensorShape {
                file: self.source_name().to_owned(),
                tensor: name.to_owned(),
                got: t.dims,
                want: dims.to_vec(),
            });
        }
        Ok(t)
    }
}

impl TensorSource for crate::gguf::GgufFile {
    fn source_name(&self) -> &str {
        &self.name
    }

    fn find(&self, name: &str) -> Option<Tensor> {
        let info = self.header.tensor(name)?;
        let start = self.header.data_offset + info.offset;
        Some(Tensor::new(
            info.name.clone(),
            info.ty,
            info.dims.clone(),
            self.bytes().clone(),
            start,
            info.n_bytes,
        ))
    }
}
