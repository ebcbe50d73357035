//! Hugging Face checkpoints: `config.json` plus `model.safetensors`, or
//! shards listed in `model.safetensors.index.json`. Tensors stay in the
//! memory-mapped shards; F32, F16 and BF16 are read as they are.

use crate::mmap::map_file;
use crate::weights::{Tensor, TensorSource};
use crate::{Error, Result};
use hasten_kernels::GgmlType;
use safetensors::tensor::Dtype;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// All tensors of a checkpoint directory, across its shards.
#[derive(Debug)]
pub struct SafetensorsDir {
    pub dir: PathBuf,
    name: String,
    tensors: HashMap<String, Tensor>,
}

impl SafetensorsDir {
    /// Opens the checkpoint in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        let name = dir.display().to_string();
        let index = dir.join("model.safetensors.index.json");
        let shards: Vec<PathBuf> = if index.exists() {
            let text = read_text(&index)?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| malformed(&index, e.to_string()))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| malformed(&index, "no weight_map object".into()))?;
            let mut files: Vec<String> = map
                .values()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect();
            files.sort();
            files.dedup();
            for f in &files {
                if f.contains("..") || f.contains('/') || f.contains('\\') {
                    return Err(malformed(
                        &index,
                        format!("shard name {f:?} leaves the directory"),
                    ));
                }
            }
            files.into_iter().map(|f| dir.join(f)).collect()
        } else {
            vec![dir.join("model.safetensors")]
        };
        let mut tensors = HashMap::new();
        for shard in shards {
            read_shard(&shard, &mut tensors)?;
        }
        Ok(SafetensorsDir {
            dir: dir.to_owned(),
            name,
            tensors,
        })
    }

    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }
}

impl TensorSource for SafetensorsDir {
    fn source_name(&self) -> &str {
        &self.name
    }

    fn find(&self, name: &str) -> Option<Tensor> {
        self.tensors.get(name).cloned()
    }
}

fn malformed(path: &Path, what: String) -> Error {
    Error::Malformed {
        file: path.display().to_string(),
        what,
    }
}

pub(crate) fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|err| Error::Io {
        path: path.to_owned(),
        err,
    })
}

/// A multimodal checkpoint (Gemma 3's `Gemma3ForConditionalGeneration`,
/// Mistral 3's, LLaVA's) nests its language model: its tensors are renamed
/// to a text model's (`language_model.model.X` and, in newer
/// `transformers`, `model.language_model.X` become `model.X`;
/// `language_model.lm_head.X` becomes `lm_head.X`), and the vision tower's
/// and projector's are skipped (`None`).
fn text_model_name(name: &str) -> Option<String> {
    const VISION: [&str; 4] = [
        "vision_tower.",
        "multi_modal_projector.",
        "model.vision_tower.",
        "model.multi_modal_projector.",
    ];
    if VISION.iter().any(|p| name.starts_with(p)) {
        return None;
    }
    let renamed = [
        ("language_model.model.", "model."),
        ("model.language_model.", "model."),
        ("language_model.lm_head.", "lm_head."),
    ]
    .iter()
    .find_map(|(from, to)| name.strip_prefix(from).map(|rest| format!("{to}{rest}")));
    Some(renamed.unwrap_or_else(|| name.to_owned()))
}

fn read_shard(path: &Path, out: &mut HashMap<String, Tensor>) -> Result<()> {
    let bytes = map_file(path)?;
    let data = bytes.as_slice();
    let (header_len, meta) = safetensors::SafeTensors::read_metadata(data)
        .map_err(|e| malformed(path, e.to_string()))?;
    let base = 8 + header_len;
    for (name, info) in meta.tensors() {
        let Some(name) = text_model_name(&name) else {
            continue;
        };
        let ty = match info.dtype {
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            Dtype::BF16 => GgmlType::BF16,
            other => {
                return Err(Error::UnsupportedTensorType {
                    file: path.display().to_string(),
                    tensor: name,
                    type_name: format!("{other:?}"),
                });
            }
        };
        let (start, end) = info.data_offsets;
        // Safetensors is row-major with the last dimension fastest; ggml order reverses it.
        let dims: Vec<usize> = info.shape.iter().rev().copied().collect();
        let n: usize = dims.iter().product();
        if end < start || base + end > data.len() || (end - start) != n * ty.block_bytes() {
            return Err(malformed(
                path,
                format!(
                    "tensor {name:?}: data offsets {start}..{end} disagree with shape {:?}",
                    info.shape
                ),
            ));
        }
        out.insert(
            name.clone(),
            Tensor::new(name, ty, dims, bytes.clone(), base + start, end - start),
        );
    }
    Ok(())
}
