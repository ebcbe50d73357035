//! The one error type of hasten-kernels.

/// Errors raised by kernels when their inputs break a documented contract.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A row length is not a multiple of the type's block size.
    #[error("{ty}: row length {len} is not a multiple of the block size {block}")]
    RowNotBlockMultiple {
        ty: &'static str,
        len: usize,
        block: usize,
    },
    /// A byte buffer does not hold exactly the data its shape implies.
    #[error("{ty}: expected {expected} bytes for {elements} elements, got {got}")]
    ByteLength {
        ty: &'static str,
        elements: usize,
        expected: usize,
        got: usize,
    },
    /// Two operands disagree on a dimension.
    #[error("shape mismatch in {op}: {detail}")]
    Shape { op: &'static str, detail: String },
    /// A ggml type id that hasten does not implement.
    #[error("unsupported ggml tensor type id {0}")]
    UnsupportedType(u32),
    /// A thread count outside 1..=MAX_THREADS.
    #[error("thread count {0} is out of range 1..={max}", max = crate::threads::MAX_THREADS)]
    Threads(usize),
}

pub type Result<T> = std::result::Result<T, Error>;
