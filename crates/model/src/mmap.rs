//! Read-only memory maps of weight files: the only `unsafe` in this crate.

#![allow(unsafe_code)]

use crate::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// Bytes of a weight file: memory-mapped from disk, or owned (tests, tiny
/// tensors built at load time).
#[derive(Debug, Clone)]
pub enum Bytes {
    Mapped(Arc<memmap2::Mmap>),
    Owned(Arc<Vec<u8>>),
}

impl Bytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// Maps `path` read-only.
///
/// The contract, as for every memory-mapped reader: the file must not be
/// truncated or modified while hasten runs. Model files are written once and
/// read many times, which is how every inference engine treats them.
pub fn map_file(path: &Path) -> Result<Bytes> {
    let file = std::fs::File::open(path).map_err(|err| Error::Io {
        path: path.to_owned(),
        err,
    })?;
    let len = file
        .metadata()
        .map_err(|err| Error::Io {
            path: path.to_owned(),
            err,
        })?
        .len();
    if len == 0 {
        // Mapping an empty file fails on some platforms; an empty buffer is equivalent.
        return Ok(Bytes::Owned(Arc::new(Vec::new())));
    }
    // SAFETY: the map is read-only and lives as long as every slice handed
    // out from it (they borrow the Arc). Concurrent modification of the file
    // would be visible through it; the documented contract above forbids that.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|err| Error::Io {
        path: path.to_owned(),
        err,
    })?;
    Ok(Bytes::Mapped(Arc::new(map)))
}
