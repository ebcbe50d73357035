//! The KJV text as training documents: whole chapters as running text, and
//! chat turns (a verse from the user, the next two from the assistant) in
//! the default model's chat format.

use rand::seq::SliceRandom;
use rand::Rng;

pub const END: &str = "<|end|>";
pub const SPECIALS: &[&str] = &[END, "<|user|>", "<|assistant|>", "<|system|>"];

/// The chat template shipped in the GGUF (rendered as Hugging Face does).
pub const CHAT_TEMPLATE: &str = "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

/// Chapters (title, verses) from the `bible` program's output.
pub fn chapters(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let starts_verse = line.starts_with(' ')
            && t.split_whitespace()
                .next()
                .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit()));
        if starts_verse {
            let body = t.split_once(' ').map_or("", |(_, b)| b).trim().to_owned();
            if let Some(c) = out.last_mut() {
                c.1.push(body);
            }
        } else if !line.starts_with(' ')
            && t.rsplit(' ')
                .next()
                .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit()))
            && out.last().is_none_or(|c| !c.1.is_empty())
            && is_title(t)
        {
            out.push((t.to_owned(), Vec::new()));
        } else if let Some(v) = out.last_mut().and_then(|c| c.1.last_mut()) {
            // A wrapped continuation of the verse.
            v.push(' ');
            v.push_str(t);
        }
    }
    out
}

fn is_title(t: &str) -> bool {
    // "Genesis 1", "1 Kings 3", "Song of Solomon 2": short, ends in a number.
    t.len() < 30 && t.split_whitespace().count() <= 4
}

/// Training documents, shuffled with `rng`.
pub fn documents(chapters: &[(String, Vec<String>)], rng: &mut impl Rng) -> Vec<String> {
    let mut docs = Vec::new();
    for (title, verses) in chapters {
        docs.push(format!("{title}\n\n{}\n", verses.join("\n")));
        let mut i = 0;
        while i + 2 < verses.len() {
            docs.push(format!(
                "<|user|>\n{}{END}\n<|assistant|>\n{} {}{END}\n",
                verses[i],
                verses[i + 1],
                verses[i + 2]
            ));
            i += rng.gen_range(2..5);
        }
    }
    docs.shuffle(rng);
    docs
}
