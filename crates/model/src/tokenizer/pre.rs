//! Byte-level BPE pre-tokenizers: llama.cpp's `tokenizer.ggml.pre` names
//! and the regular expressions each applies in turn (every expression
//! splits the pieces the previous ones left, keeping both matches and the
//! text between them), as `llama-vocab.cpp` lists them.

/// How a pre-tokenizer splits text, and whether a whole pre-token found in
/// the vocabulary is used before any merge (Llama 3, Tekken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pre {
    pub regexes: &'static [&'static str],
    pub ignore_merges: bool,
}

const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-2's expression, as llama.cpp writes it (whitespace the last
/// alternative leaves becomes a piece of its own all the same).
const GPT2_NO_TAIL: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
/// DeepSeek's classes, as code points: the characters of llama.cpp's
/// source include ones (Kelvin sign, Ohm sign, Greek with oxia) that
/// Unicode normalization would silently turn into others.
const CJK: &str = r"[\x{4e00}-\x{9fa5}\x{800}-\x{4e00}\x{ac00}-\x{d7ff}]+";
const DEEPSEEK_LETTERS: &str = r"\s?[A-Za-z\x{b5}\x{c0}-\x{d6}\x{d8}-\x{f6}\x{f8}-\x{1ba}\x{1bc}-\x{1bf}\x{1c4}-\x{293}\x{295}-\x{2af}\x{370}-\x{373}\x{376}\x{377}\x{37b}-\x{37d}\x{37f}\x{386}\x{388}-\x{38a}\x{38c}\x{38e}-\x{3a1}\x{3a3}-\x{3f5}\x{3f7}-\x{481}\x{48a}-\x{52f}\x{531}-\x{556}\x{10a0}-\x{10c5}\x{13a0}-\x{13f5}\x{13f8}-\x{13fd}\x{1c90}-\x{1cba}\x{1cbd}-\x{1cbf}\x{1d00}-\x{1d2b}\x{1d6b}-\x{1d77}\x{1d79}-\x{1d9a}\x{1e00}-\x{1f15}\x{1f18}-\x{1f1d}\x{1f20}-\x{1f45}\x{1f48}-\x{1f4d}\x{1f50}-\x{1f57}\x{1f59}\x{1f5b}\x{1f5d}\x{1f5f}-\x{1f7d}\x{1f80}-\x{1fb4}\x{1fb6}-\x{1fbc}\x{1fbe}\x{1fc2}-\x{1fc4}\x{1fc6}-\x{1fcc}\x{1fd0}-\x{1fd3}\x{1fd6}-\x{1fdb}\x{1fe0}-\x{1fec}\x{1ff2}-\x{1ff4}\x{1ff6}-\x{1ffc}\x{2102}\x{2107}\x{210a}-\x{2113}\x{2115}\x{2119}-\x{211d}\x{2124}\x{2126}\x{2128}\x{212a}-\x{212d}\x{212f}-\x{2134}\x{2139}\x{213c}-\x{213f}\x{2145}-\x{2149}\x{214e}\x{2183}\x{2184}\x{2c00}-\x{2c7b}\x{2c7e}-\x{2ce4}\x{2ceb}-\x{2cee}\x{2cf2}\x{2cf3}\x{a640}-\x{a66d}\x{a680}-\x{a69b}\x{a722}-\x{a76f}\x{a771}-\x{a787}\x{a78b}-\x{a78e}\x{ab70}-\x{abbf}\x{fb00}-\x{fb06}\x{fb13}-\x{fb17}\x{ff21}-\x{ff3a}\x{ff41}-\x{ff5a}\x{10400}-\x{1044f}\x{104b0}-\x{104d3}\x{104d8}-\x{104fb}\x{10c80}-\x{10cb2}\x{10cc0}-\x{10cf2}\x{118a0}-\x{118df}\x{1e900}-\x{1e943}]+";
const DEEPSEEK_PUNCT: &str =
    r"\s?[!-/:-~\x{ff01}-\x{ff0f}\x{ff1a}-\x{ff5e}\x{2018}-\x{201f}\x{3000}-\x{3002}]+";

/// Name groups and their expressions.
const TABLE: &[(&[&str], Pre)] = &[
    (
        &[
            "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
            "lfm2",
        ],
        Pre {
            regexes: &[LLAMA3],
            ignore_merges: true,
        },
    ),
    (
        &["dbrx", "smaug-bpe", "chatglm-bpe"],
        Pre {
            regexes: &[LLAMA3],
            ignore_merges: false,
        },
    ),
    (
        &["glm4", "glm5"],
        Pre {
            regexes: &[LLAMA3],
            ignore_merges: true,
        },
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        Pre {
            regexes: &[QWEN2],
            ignore_merges: false,
        },
    ),
    (
        &["qwen35"],
        Pre {
            regexes: &[QWEN35],
            ignore_merges: false,
        },
    ),
    (
        &[
            "gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling",
            "gigachat", "mellum", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de",
        ],
        Pre {
            regexes: &[GPT2_NO_TAIL],
            ignore_merges: false,
        },
    ),
    (
        &[
            "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
            "mellum2",
        ],
        Pre {
            regexes: &[r"\p{N}", GPT2_NO_TAIL],
            ignore_merges: false,
        },
    ),
    (
        &["deepseek-llm"],
        Pre {
            regexes: &[
                "[\r\n]",
                DEEPSEEK_LETTERS,
                DEEPSEEK_PUNCT,
                r"\s+$",
                CJK,
                r"\p{N}+",
            ],
            ignore_merges: false,
        },
    ),
    (
        &["deepseek-coder"],
        Pre {
            regexes: &["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"],
            ignore_merges: false,
        },
    ),
    (
        &["deepseek-v3", "hunyuan-dense", "joyai-llm"],
        Pre {
            regexes: &[
                r"\p{N}{1,3}",
                "[一-龥぀-ゟ゠-ヿ]+",
                "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
            ],
            ignore_merges: false,
        },
    ),
    (
        &["falcon"],
        Pre {
            regexes: &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2_NO_TAIL, "[0-9][0-9][0-9]"],
            ignore_merges: false,
        },
    ),
    (
        &["poro-chat", "bloom", "gpt3-finnish"],
        Pre {
            regexes: &[BLOOM],
            ignore_merges: false,
        },
    ),
    (
        &["viking"],
        Pre {
            regexes: &[BLOOM, r"\p{N}"],
            ignore_merges: false,
        },
    ),
    (
        &["tekken"],
        Pre {
            regexes: &[TEKKEN],
            ignore_merges: true,
        },
    ),
    (
        &["gpt-4o", "llama4", "kanana2", "minimax-m2"],
        Pre {
            regexes: &[GPT4O],
            ignore_merges: false,
        },
    ),
    // Files without `tokenizer.ggml.pre` (older GPT-NeoX, Aquila): llama.cpp's default.
    (
        &["default"],
        Pre {
            regexes: &[
                r"[\p{P}\$\+<=>\^~\|]+",
                GPT2_NO_TAIL,
                r"\p{N}+",
                "[0-9][0-9][0-9]",
            ],
            ignore_merges: false,
        },
    ),
];

/// The pre-tokenizer llama.cpp uses for `name`.
pub fn lookup(name: &str) -> Option<Pre> {
    TABLE
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|&(_, p)| p)
}

/// Every supported name, for error messages.
pub fn names() -> String {
    TABLE
        .iter()
        .flat_map(|(n, _)| n.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};

    #[test]
    fn every_expression_compiles() {
        for (names, p) in TABLE {
            for (i, r) in p.regexes.iter().enumerate() {
                let s = Split::new(
                    SplitPattern::Regex((*r).into()),
                    tokenizers::SplitDelimiterBehavior::Isolated,
                    false,
                );
                assert!(s.is_ok(), "{names:?} expression {i}: {:?}", s.err());
            }
        }
        assert!(names().contains("deepseek-llm"));
        assert_eq!(lookup("smollm").unwrap().regexes.len(), 2);
        assert!(lookup("unknown").is_none());
    }
}
