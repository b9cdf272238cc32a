//! Diagnostics: the error collector, the `SpanId` → source-range table, and
//! "did you mean" suggestions.
//!
//! Expects nothing. Guarantees that every error the frontend finds is kept
//! (in the order found) and can be turned into one `syn::Error`, and that
//! every `SpanId` handed to `tile-ir` maps back to the tokens it came from.

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::ToTokens;
use tile_ir::SpanId;

/// Marker: the error has been recorded in [`Errors`]; the caller should give
/// up on the current construct and go on with the next one.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reported;

pub(crate) type Lowered<T> = Result<T, Reported>;

/// Collects every error of one kernel, like serde's `Ctxt`.
#[derive(Default)]
pub(crate) struct Errors {
    errors: Vec<syn::Error>,
}

impl Errors {
    pub fn push(&mut self, error: syn::Error) -> Reported {
        self.errors.push(error);
        Reported
    }

    /// An error at one span (an identifier, a literal, a keyword).
    pub fn at(&mut self, span: Span, message: impl std::fmt::Display) -> Reported {
        self.push(syn::Error::new(span, message))
    }

    /// An error covering all of `tokens` (first to last token).
    pub fn spanned(&mut self, tokens: &dyn ToTokens, message: impl std::fmt::Display) -> Reported {
        self.push(syn::Error::new_spanned(tokens.to_token_stream(), message))
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// How many errors were reported so far.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Drops the errors from index `start` on that repeat an earlier one
    /// (same span, same message): a helper's body lowered at each call
    /// reports its mistakes once.
    pub fn drop_repeats_from(&mut self, start: usize) {
        let key = |e: &syn::Error| (format!("{:?}", e.span()), e.to_string());
        let mut seen: Vec<(String, String)> = self.errors[..start].iter().map(key).collect();
        for e in self.errors.split_off(start) {
            let k = key(&e);
            if !seen.contains(&k) {
                seen.push(k);
                self.errors.push(e);
            }
        }
    }

    /// All errors combined into one, or `None` if there were none.
    /// The messages, in order (for tests).
    #[cfg(test)]
    pub fn messages(&self) -> Vec<String> {
        self.errors.iter().flat_map(|e| e.clone().into_iter().map(|e| e.to_string())).collect()
    }

    /// Every error, each with one message.
    pub fn into_single(self) -> Vec<syn::Error> {
        self.errors.into_iter().flat_map(|e| e.into_iter()).collect()
    }

    pub fn combined(self) -> Option<syn::Error> {
        let mut iter = self.errors.into_iter();
        let mut first = iter.next()?;
        for e in iter {
            first.combine(e);
        }
        Some(first)
    }
}

/// The first and last token spans of some tokens: enough to rebuild a
/// multi-token error span with `syn::Error::new_spanned`.
#[derive(Copy, Clone, Debug)]
pub(crate) struct SpanRange {
    pub start: Span,
    pub end: Span,
}

impl SpanRange {
    pub fn of(tokens: &dyn ToTokens) -> SpanRange {
        let mut iter = tokens.to_token_stream().into_iter();
        let start = iter.next().map_or_else(Span::call_site, |t| t.span());
        let end = iter.last().map_or(start, |t| t.span());
        SpanRange { start, end }
    }

    pub fn single(span: Span) -> SpanRange {
        SpanRange { start: span, end: span }
    }

    pub fn error(self, message: impl std::fmt::Display) -> syn::Error {
        let tokens: TokenStream =
            [TokenTree::Ident(Ident::new("start", self.start)), TokenTree::Ident(Ident::new("end", self.end))]
                .into_iter()
                .collect();
        syn::Error::new_spanned(tokens, message)
    }
}

/// The tokens an error covers (first and last), read back from its
/// `compile_error!` (syn keeps them, but does not expose the end).
pub(crate) fn range_of_error(e: &syn::Error) -> SpanRange {
    let tokens: Vec<TokenTree> = e.to_compile_error().into_iter().collect();
    let start = tokens.first().map_or_else(|| e.span(), |t| t.span());
    let end = tokens.last().map_or(start, |t| t.span());
    SpanRange { start, end }
}

/// Source ranges of the statements and buffers of one kernel, indexed by
/// `SpanId`, so that errors from `tile_ir::verify` and `tile_ir::compile`
/// point at the user's code.
pub(crate) struct SpanTable {
    ranges: Vec<SpanRange>,
    /// Where errors without a usable `SpanId` go: the kernel's name.
    fallback: Span,
}

impl SpanTable {
    pub fn new(fallback: Span) -> SpanTable {
        SpanTable { ranges: Vec::new(), fallback }
    }

    pub fn add(&mut self, tokens: &dyn ToTokens) -> SpanId {
        self.add_range(SpanRange::of(tokens))
    }

    pub fn add_range(&mut self, range: SpanRange) -> SpanId {
        self.ranges.push(range);
        SpanId(self.ranges.len() as u32 - 1)
    }

    pub fn range(&self, id: SpanId) -> SpanRange {
        self.ranges.get(id.0 as usize).copied().unwrap_or(SpanRange::single(self.fallback))
    }

    /// The line of every span (for the interpreter's messages), with the
    /// kernel's file; `None` when the compiler gives no lines (proc macros
    /// know them from Rust 1.88: on older compilers every line reads 0 and
    /// the messages fall back to the statement's text).
    pub fn source_map(&self) -> Option<tile_ir::SourceMap> {
        let lines: Vec<u32> = self.ranges.iter().map(|r| u32::try_from(r.start.start().line).unwrap_or(0)).collect();
        if lines.iter().all(|&l| l == 0) {
            return None;
        }
        Some(tile_ir::SourceMap { file: self.fallback.file(), lines })
    }
}

/// The closest candidate to `name` by edit distance, if close enough to be
/// a plausible typo.
pub(crate) fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != name)
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Edit distance with adjacent transpositions (optimal string alignment),
/// case-sensitive: `cuont` is one edit from `count`.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// ` (did you mean `x`?)`-style suffix, or nothing.
pub(crate) fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    match closest(name, candidates) {
        Some(c) => format!("; did you mean `{c}`?"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(closest("exp3", ["exp2", "exp", "log2"]), Some("exp2"));
        assert_eq!(closest("reduce_mx", ["reduce_max", "reduce_min"]), Some("reduce_max"));
        assert_eq!(closest("frobnicate", ["exp2", "copy"]), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("cuont", "count"), 1);
    }
}
