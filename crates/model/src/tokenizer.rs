//! Text to token ids and back, the way llama.cpp and Hugging Face do it.
//!
//! From GGUF metadata the vocabulary becomes a `tokenizers` BPE model:
//! - SentencePiece (`tokenizer.ggml.model = llama`): merges are derived from
//!   the vocabulary, ranked by the score of the merged piece (SentencePiece
//!   BPE merges the highest-scoring pair first), with byte fallback.
//! - byte-level BPE (`gpt2`): the file's merges, the regex pre-tokenizers
//!   of `tokenizer.ggml.pre` (llama.cpp's table, in [`pre`]), then GPT-2's
//!   byte-to-unicode mapping.
//!
//! Special tokens are split out before the BPE model sees the text, as in
//! llama.cpp: user-defined tokens always, control tokens only when
//! `parse_special` is set (chat prompts), so user text cannot forge them.
//! From `tokenizer.json` the Hugging Face tokenizer is used as it is.

use crate::gguf::GgufHeader;
use crate::{Error, Result};
use std::collections::HashMap;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
}

mod pre;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SentencePiece,
    ByteLevel,
}

/// A tokenizer with its special tokens and the byte string of every token.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    kind: Kind,
    /// GGUF only: whether the BPE model sees raw fragments (HF handles its own).
    gguf: bool,
    add_space_prefix: bool,
    /// Specials split out of text, longest first.
    specials: Vec<Special>,
    pieces: Vec<Vec<u8>>,
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
    pub add_bos: bool,
    token_index: HashMap<String, u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("vocab", &self.pieces.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

fn missing(file: &str, key: &str) -> Error {
    Error::MissingKey {
        file: file.to_owned(),
        key: key.to_owned(),
    }
}

fn str_array(h: &GgufHeader, file: &str, key: &str) -> Result<Vec<String>> {
    let arr = h
        .get(key)
        .ok_or_else(|| missing(file, key))?
        .as_array()
        .ok_or_else(|| Error::KeyType {
            file: file.into(),
            key: key.into(),
            want: "array",
        })?;
    arr.iter()
        .map(|v| {
            v.as_str().map(str::to_owned).ok_or_else(|| Error::KeyType {
                file: file.into(),
                key: key.into(),
                want: "array of strings",
            })
        })
        .collect()
}

fn num_array(h: &GgufHeader, key: &str) -> Option<Vec<f64>> {
    h.get(key)?.as_array()?.iter().map(|v| v.as_f64()).collect()
}

/// The vocabulary in the map type the `tokenizers` BPE builder takes.
fn bpe_vocab(vocab: &HashMap<String, u32>) -> tokenizers::models::bpe::Vocab {
    vocab.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

/// GPT-2's reversible map from bytes to printable characters.
fn byte_to_char() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        map[b as usize] = if printable {
            char::from_u32(b).unwrap_or('\0')
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap_or('\0')
        };
    }
    map
}

fn byte_level_bytes(piece: &str, inverse: &HashMap<char, u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(piece.len());
    for ch in piece.chars() {
        match inverse.get(&ch) {
            Some(&b) => out.push(b),
            None => out.extend_from_slice(ch.to_string().as_bytes()),
        }
    }
    out
}

fn spm_bytes(piece: &str) -> Vec<u8> {
    if piece.len() == 6 && piece.starts_with("<0x") && piece.ends_with('>') {
        if let Ok(b) = u8::from_str_radix(&piece[3..5], 16) {
            return vec![b];
        }
    }
    piece.replace('\u{2581}', " ").into_bytes()
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF header's `tokenizer.*` keys.
    pub fn from_gguf(h: &GgufHeader, file: &str) -> Result<Self> {
        let model = h
            .get("tokenizer.ggml.model")
            .and_then(|v| v.as_str())
            .ok_or_else(|| missing(file, "tokenizer.ggml.model"))?;
        let tokens = str_array(h, file, "tokenizer.ggml.tokens")?;
        let n = tokens.len();
        let types: Vec<i32> = match num_array(h, "tokenizer.ggml.token_type") {
            Some(t) if t.len() == n => t.into_iter().map(|x| x as i32).collect(),
            Some(_) => {
                return Err(Error::Malformed {
                    file: file.into(),
                    what: "tokenizer.ggml.token_type length differs from tokens".into(),
                })
            }
            None => vec![token_type::NORMAL; n],
        };
        let id_key = |k: &str| {
            h.get(k)
                .and_then(|v| v.as_u64())
                .map(|v| v as u32)
                .filter(|&v| (v as usize) < n)
        };
        let flag = |k: &str| h.get(k).and_then(|v| v.as_bool());
        let pre = h
            .get("tokenizer.ggml.pre")
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        let mut vocab: HashMap<String, u32> = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            // Duplicate pieces exist in some vocabularies; the first id wins, as in llama.cpp.
            vocab.entry(t.clone()).or_insert(i as u32);
        }
        let (kind, bpe, pre_tok) = match model {
            "llama" => {
                let scores = num_array(h, "tokenizer.ggml.scores")
                    .filter(|s| s.len() == n)
                    .ok_or_else(|| missing(file, "tokenizer.ggml.scores"))?;
                let merges = spm_merges(&tokens, &scores, &types, &vocab);
                let unk = id_key("tokenizer.ggml.unknown_token_id")
                    .map(|i| tokens[i as usize].clone())
                    .unwrap_or_else(|| "<unk>".into());
                let bpe = BPE::builder()
                    .vocab_and_merges(bpe_vocab(&vocab), merges)
                    .byte_fallback(true)
                    .unk_token(unk)
                    .fuse_unk(true)
                    .build()
                    .map_err(tok_err)?;
                (Kind::SentencePiece, bpe, None)
            }
            "gpt2" => {
                let merges = str_array(h, file, "tokenizer.ggml.merges")?;
                let merges = merges
                    .iter()
                    .map(|m| m.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| Error::Malformed {
                        file: file.into(),
                        what: "a merge in tokenizer.ggml.merges has no space".into(),
                    })?;
                let p = pre::lookup(pre).ok_or_else(|| {
                    Error::Tokenizer(format!(
                        "{file}: pre-tokenizer {pre:?} is not supported (supported: {})",
                        pre::names()
                    ))
                })?;
                // Llama 3 uses a whole pre-token when the vocabulary has it, before any merge.
                let bpe = BPE::builder()
                    .vocab_and_merges(bpe_vocab(&vocab), merges)
                    .ignore_merges(p.ignore_merges)
                    .build()
                    .map_err(tok_err)?;
                let mut steps = Vec::with_capacity(p.regexes.len() + 1);
                for regex in p.regexes {
                    let split = Split::new(
                        SplitPattern::Regex((*regex).into()),
                        SplitDelimiterBehavior::Isolated,
                        false,
                    )
                    .map_err(tok_err)?;
                    steps.push(PreTokenizerWrapper::Split(split));
                }
                let bl = ByteLevel::default()
                    .add_prefix_space(false)
                    .use_regex(false);
                steps.push(PreTokenizerWrapper::ByteLevel(bl));
                let seq = Sequence::new(steps);
                (Kind::ByteLevel, bpe, Some(seq))
            }
            other => {
                return Err(Error::Tokenizer(format!(
                    "{file}: tokenizer model {other:?} is not supported (llama and gpt2 are)"
                )))
            }
        };
        let mut inner = tokenizers::Tokenizer::new(bpe);
        if let Some(p) = pre_tok {
            inner.with_pre_tokenizer(Some(p));
        }
        let inverse: HashMap<char, u8> = byte_to_char()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        let pieces = tokens
            .iter()
            .zip(&types)
            .map(|(t, &ty)| match (ty, kind) {
                (token_type::CONTROL, _) => Vec::new(),
                (token_type::USER_DEFINED, _) => t.clone().into_bytes(),
                (_, Kind::SentencePiece) => spm_bytes(t),
                (_, Kind::ByteLevel) => byte_level_bytes(t, &inverse),
            })
            .collect();
        // llama.cpp gives Phi-3's special tokens (but these three) the
        // RSTRIP attribute when the model's name says Phi-3, as its
        // tokenizer_config.json does; GGUF carries no attributes.
        let name = h
            .get("general.name")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_lowercase();
        let phi3 = name.contains("phi-3") || name.contains("phi3");
        let mut specials: Vec<Special> = tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (t, &ty))| {
                !t.is_empty()
                    && matches!(
                        ty,
                        token_type::CONTROL | token_type::USER_DEFINED | token_type::UNKNOWN
                    )
            })
            .map(|(i, (t, &ty))| Special {
                text: t.clone(),
                id: i as u32,
                control: ty != token_type::USER_DEFINED,
                rstrip: phi3 && !matches!(t.as_str(), "<unk>" | "<s>" | "<|endoftext|>"),
            })
            .collect();
        specials.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        let bos = id_key("tokenizer.ggml.bos_token_id");
        let mut eos: Vec<u32> = [
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id",
        ]
        .iter()
        .filter_map(|k| id_key(k))
        .collect();
        eos.dedup();
        let add_bos = flag("tokenizer.ggml.add_bos_token")
            .unwrap_or(kind == Kind::SentencePiece || pre == "llama-bpe")
            && bos.is_some();
        Ok(Tokenizer {
            inner,
            kind,
            gguf: true,
            add_space_prefix: kind == Kind::SentencePiece
                && flag("tokenizer.ggml.add_space_prefix").unwrap_or(true),
            specials,
            pieces,
            bos,
            eos,
            add_bos,
            token_index: vocab,
        })
    }

    /// Loads a Hugging Face `tokenizer.json`, with BOS/EOS from
    /// `tokenizer_config.json`-style names when given.
    pub fn from_hf_json(
        json: &str,
        bos: Option<&str>,
        eos: &[String],
        add_bos: bool,
    ) -> Result<Self> {
        // The tokenizers crate panics on some malformed files (e.g. a
        // `decoder` of the wrong shape: `.expect("Helper")`); a file from
        // outside must give an error, not take the process down.
        let parsed = std::panic::catch_unwind(|| json.parse::<tokenizers::Tokenizer>());
        let inner = match parsed {
            Ok(r) => r.map_err(tok_err)?,
            Err(_) => {
                return Err(Error::Tokenizer(
                    "tokenizer.json is malformed (the tokenizers library could not read it)".into(),
                ))
            }
        };
        let vocab = inner.get_vocab(true);
        let n = inner.get_vocab_size(true);
        let byte_level = [
            serde_json::to_string(&inner.get_pre_tokenizer()),
            serde_json::to_string(&inner.get_decoder()),
        ]
        .iter()
        .any(|s| s.as_ref().is_ok_and(|s| s.contains("ByteLevel")));
        let kind = if byte_level {
            Kind::ByteLevel
        } else {
            Kind::SentencePiece
        };
        let inverse: HashMap<char, u8> = byte_to_char()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        let added = inner.get_added_tokens_decoder();
        let mut pieces = vec![Vec::new(); n];
        for (piece, &id) in &vocab {
            if let Some(slot) = pieces.get_mut(id as usize) {
                *slot = match added.get(&id) {
                    Some(a) if a.special => Vec::new(),
                    Some(a) => a.content.clone().into_bytes(),
                    None if byte_level => byte_level_bytes(piece, &inverse),
                    None => spm_bytes(piece),
                };
            }
        }
        let bos = bos.and_then(|b| vocab.get(b).copied());
        let eos = eos.iter().filter_map(|e| vocab.get(e).copied()).collect();
        Ok(Tokenizer {
            inner,
            kind,
            gguf: false,
            add_space_prefix: false,
            specials: Vec::new(),
            pieces,
            bos,
            eos,
            add_bos: add_bos && bos.is_some(),
            token_index: vocab.into_iter().collect(),
        })
    }

    /// The tokenizer as a Hugging Face `tokenizer.json`, with the normalizer
    /// and decoder that `transformers` uses for this kind of vocabulary.
    /// Special tokens are not registered as added tokens.
    pub fn to_hf_json(&self) -> Result<String> {
        use tokenizers::decoders::{
            byte_fallback::ByteFallback, fuse::Fuse, sequence::Sequence as DecSeq, strip::Strip,
        };
        use tokenizers::normalizers::{Prepend, Replace};
        use tokenizers::{DecoderWrapper, NormalizerWrapper};
        let mut t = self.inner.clone();
        match self.kind {
            Kind::SentencePiece => {
                let mut norms = Vec::new();
                if self.add_space_prefix {
                    norms.push(NormalizerWrapper::Prepend(Prepend::new("\u{2581}".into())));
                }
                norms.push(NormalizerWrapper::Replace(
                    Replace::new(" ", "\u{2581}").map_err(tok_err)?,
                ));
                t.with_normalizer(Some(tokenizers::normalizers::Sequence::new(norms)));
                let dec = DecSeq::new(vec![
                    DecoderWrapper::Replace(Replace::new("\u{2581}", " ").map_err(tok_err)?),
                    DecoderWrapper::ByteFallback(ByteFallback::new()),
                    DecoderWrapper::Fuse(Fuse::new()),
                    DecoderWrapper::Strip(Strip::new(' ', 1, 0)),
                ]);
                t.with_decoder(Some(dec));
            }
            Kind::ByteLevel => {
                t.with_decoder(Some(ByteLevel::default()));
            }
        }
        t.to_string(false).map_err(tok_err)
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// The id of a token given by its exact text, if the vocabulary has it.
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.token_index.get(piece).copied()
    }

    /// The bytes token `id` stands for (empty for control tokens).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.pieces.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// The most bytes of text one token stands for (at least 1): a text of
    /// `n` bytes has at least `n / max_token_bytes()` tokens, a bound the
    /// server checks before tokenizing anything.
    pub fn max_token_bytes(&self) -> usize {
        self.pieces.iter().map(Vec::len).max().unwrap_or(1).max(1)
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos.contains(&id)
    }

    /// The vocabulary text of token `id`, for `--pieces` displays.
    pub fn piece(&self, id: u32) -> String {
        self.inner.id_to_token(id).unwrap_or_default()
    }

    /// Tokenizes `text`. `add_bos` prepends BOS (if the vocabulary has one);
    /// `parse_special` lets control-token text (e.g. `<|im_start|>`) become
    /// the control token, as chat prompts need.
    pub fn encode(&self, text: &str, add_bos: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if add_bos {
            out.extend(self.bos);
        }
        if !self.gguf {
            let enc = self.inner.encode(text, false).map_err(tok_err)?;
            out.extend_from_slice(enc.get_ids());
            return Ok(out);
        }
        let mut prev_special = true;
        for frag in self.partition(text, parse_special) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(t) => {
                    if self.kind == Kind::SentencePiece {
                        let mut s = String::with_capacity(t.len() + 3);
                        if self.add_space_prefix && prev_special {
                            s.push(' ');
                        }
                        s.push_str(t);
                        let s = s.replace(' ', "\u{2581}");
                        self.encode_raw(&s, &mut out)?;
                    } else {
                        self.encode_raw(t, &mut out)?;
                    }
                    prev_special = false;
                }
            }
        }
        Ok(out)
    }

    /// Tokens of `text` as it continues an output: no BOS, no SentencePiece
    /// space prefix, no special-token parsing; their bytes are `text`'s
    /// (what a grammar engine needs for text it forces).
    pub fn encode_continuation(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if !self.gguf {
            let enc = self.inner.encode(text, false).map_err(tok_err)?;
            out.extend_from_slice(enc.get_ids());
        } else if self.kind == Kind::SentencePiece {
            self.encode_raw(&text.replace(' ', "\u{2581}"), &mut out)?;
        } else {
            self.encode_raw(text, &mut out)?;
        }
        Ok(out)
    }

    fn encode_raw(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let enc = self.inner.encode(text, false).map_err(tok_err)?;
        out.extend_from_slice(enc.get_ids());
        Ok(())
    }

    /// Splits out special tokens, longest first (llama.cpp's partition).
    fn partition<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        let mut frags = if text.is_empty() {
            vec![]
        } else {
            vec![Fragment::Text(text)]
        };
        for sp in &self.specials {
            if sp.control && !parse_special {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len());
            for f in frags {
                match f {
                    Fragment::Text(mut t) => {
                        while let Some(i) = t.find(sp.text.as_str()) {
                            if i > 0 {
                                next.push(Fragment::Text(&t[..i]));
                            }
                            next.push(Fragment::Token(sp.id));
                            t = &t[i + sp.text.len()..];
                            if sp.rstrip {
                                t = t.trim_start_matches(|c: char| {
                                    c.is_ascii_whitespace() || c == '\x0b'
                                });
                            }
                        }
                        if !t.is_empty() {
                            next.push(Fragment::Text(t));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    /// Decodes ids to text (lossy for invalid UTF-8, which cannot arise
    /// from whole outputs of a well-formed vocabulary).
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&id| self.token_bytes(id).iter().copied())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// A token split out of text before BPE (llama.cpp's partition).
struct Special {
    text: String,
    id: u32,
    /// Control tokens are split out only when special text is parsed.
    control: bool,
    /// Whitespace right after the token is dropped (llama.cpp's RSTRIP
    /// attribute, which it gives Phi-3's special tokens).
    rstrip: bool,
}

enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// Derives BPE merges from a SentencePiece vocabulary: every way to split a
/// normal piece into two pieces that are both in the vocabulary is a merge,
/// ranked by the merged piece's score (higher first), then by id.
fn spm_merges(
    tokens: &[String],
    scores: &[f64],
    types: &[i32],
    vocab: &HashMap<String, u32>,
) -> Vec<(String, String)> {
    let mut merges: Vec<(f64, u32, usize, String, String)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        if types[id] != token_type::NORMAL || vocab.get(piece) != Some(&(id as u32)) {
            continue;
        }
        for (i, _) in piece.char_indices().skip(1) {
            let (a, b) = piece.split_at(i);
            if vocab.contains_key(a) && vocab.contains_key(b) {
                merges.push((scores[id], id as u32, i, a.to_owned(), b.to_owned()));
            }
        }
    }
    merges.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    merges.into_iter().map(|(_, _, _, a, b)| (a, b)).collect()
}

#[cfg(test)]
pub(crate) mod tests;
