//! The mutation fuzz test of the frontend and the compiler (issue 12).
//!
//! Takes every `#[tile_kernel]` kernel of the examples and tests
//! (`examples/**/*.rs`, `tests/**/*.rs` without `tests/ui`, parsed with syn
//! here, at test time; a generic kernel with its first [`FUZZ_INSTANCES`]
//! instances), applies one to three random token-level mutations to
//! its attribute or its function (delete a token tree, duplicate one, swap
//! two siblings, replace an identifier with another of the same kernel,
//! replace a literal with an extreme value, insert an operator), and runs the
//! macro's own expansion (`expand_with`, every target, no ptxas) on the
//! result. A case fails on an internal error (a panic, or an "internal
//! error" in the expansion) or when it takes longer than [`CASE_LIMIT`].
//!
//! Deterministic: case `i` uses seed `TILE_FUZZ_SEED + i` (default seed 0)
//! and nothing else; a failure prints the seed, the kernel it came from and
//! the mutated kernel. Replay one case with
//! `TILE_FUZZ_SEED=<seed> TILE_FUZZ_CASES=1 cargo test -p tile-macros --lib fuzz -- --nocapture`;
//! run many with `TILE_FUZZ_CASES=10000` (`TILE_FUZZ_TRACE=1` prints each
//! seed before it runs, for a case that aborts the process, and its errors;
//! `TILE_FUZZ_PTXAS=<ptxas>` assembles every variant of the cases that
//! compile, and fails on a rejection (with 12 times the limit per case).

use crate::backend::BuildEnv;
use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::ToTokens;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use syn::visit::Visit;
use tile_ir::Target;

/// Cases that `cargo test` runs (about 7 s in a debug build on a 2-core
/// machine: most cases take a few milliseconds); `TILE_FUZZ_CASES`
/// overrides it.
const DEFAULT_CASES: u64 = 2000;

/// The longest one case may take. Expanding the largest kernel of the suite
/// (a 128 × 256 gemm, both targets, every variant) takes under 0.2 s in a
/// debug build on a 2-core machine, and the slowest of 40,000 mutated cases
/// 0.54 s with the machine shared; 5 s leaves ten times that for a busy CI
/// machine while still catching work that grows with a mutated constant (a
/// 64 × 10^6 shared tile took minutes before the verifier rejected it).
const CASE_LIMIT: Duration = Duration::from_secs(5);

/// Literals a mutation puts in place of another: the extremes of the issue.
const EXTREMES: &[&str] = &["0", "1", "2", "2147483648", "2147483647", "4294967295", "1000000", "65536", "1e30", "0.0"];

/// Operators (and punctuation) a mutation inserts.
const OPERATORS: &[&str] = &[
    "+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "!", "<", ">", "<=", "==", "!=", "&&", "||", "=", "..", ".",
    ",", ";", "&mut", "as", "-1",
];

/// One kernel of the suite: where it is, its attribute's and its item's tokens.
struct Source {
    file: String,
    name: String,
    attr: TokenStream,
    item: TokenStream,
}

/// Every `#[tile_kernel]` function of the examples and the tests.
fn kernels() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf();
    let mut files = Vec::new();
    rust_files(&root.join("examples"), &mut files);
    rust_files(&root.join("tests"), &mut files);
    files.retain(|f| !f.starts_with(root.join("tests").join("ui")));
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read a source file");
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let mut finder = Finder { file: f.strip_prefix(&root).unwrap_or(&f).display().to_string(), out: &mut out };
        finder.visit_file(&file);
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

struct Finder<'a> {
    file: String,
    out: &'a mut Vec<Source>,
}

impl<'ast> Visit<'ast> for Finder<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        let is_kernel = |a: &syn::Attribute| a.path().segments.last().is_some_and(|s| s.ident == "tile_kernel");
        if let Some(attr) = f.attrs.iter().find(|a| is_kernel(a)) {
            let attr_tokens = match &attr.meta {
                syn::Meta::List(l) => first_instances(l.tokens.clone(), FUZZ_INSTANCES),
                _ => TokenStream::new(),
            };
            let mut item = f.clone();
            // Doc comments only give the mutations text to waste them on.
            item.attrs.retain(|a| !is_kernel(a) && !a.path().is_ident("doc"));
            self.out.push(Source {
                file: self.file.clone(),
                name: f.sig.ident.to_string(),
                attr: attr_tokens,
                item: item.into_token_stream(),
            });
        }
        syn::visit::visit_item_fn(self, f);
    }
}

/// How many instances of a generic kernel the cases keep: every instance is
/// expanded like a kernel of its own, and the 13 of the example GEMM would
/// make its cases 13 times slower without exercising more of the frontend.
const FUZZ_INSTANCES: usize = 2;

/// The attribute with `instances(..)` cut to its first `keep` entries.
fn first_instances(attr: TokenStream, keep: usize) -> TokenStream {
    let mut out = Vec::new();
    let mut after_instances = false;
    for tt in attr {
        match &tt {
            TokenTree::Group(g) if after_instances && g.delimiter() == Delimiter::Parenthesis => {
                let mut kept = Vec::new();
                let mut entries = 0;
                for t in g.stream() {
                    if matches!(&t, TokenTree::Punct(p) if p.as_char() == ',') {
                        entries += 1;
                        if entries == keep {
                            break;
                        }
                    }
                    kept.push(t);
                }
                let mut group = Group::new(Delimiter::Parenthesis, kept.into_iter().collect());
                group.set_span(g.span());
                out.push(TokenTree::Group(group));
            }
            _ => out.push(tt.clone()),
        }
        after_instances = matches!(&tt, TokenTree::Ident(i) if i == "instances");
    }
    out.into_iter().collect()
}

#[test]
fn fuzz_cuts_instance_lists() {
    let cut = |s: &str| first_instances(s.parse().unwrap(), 2).to_string();
    assert_eq!(
        cut("threads = 32, instances((f16, 1), (bf16, 2), (f32, 3))"),
        "threads = 32 , instances ((f16 , 1) , (bf16 , 2))"
    );
    assert_eq!(cut("instances(f16)"), "instances (f16)");
    assert_eq!(cut("threads = 32"), "threads = 32");
    // The suite has generic kernels, so the cases cover them.
    assert!(kernels().iter().any(|k| k.attr.to_string().contains("instances")));
}

/// splitmix64: small, fast, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A token tree whose groups can be edited.
#[derive(Clone)]
enum Node {
    Leaf(TokenTree),
    Group(Delimiter, Vec<Node>),
}

fn tree(ts: TokenStream) -> Vec<Node> {
    ts.into_iter()
        .map(|tt| match tt {
            TokenTree::Group(g) => Node::Group(g.delimiter(), tree(g.stream())),
            leaf => Node::Leaf(leaf),
        })
        .collect()
}

fn stream(nodes: &[Node]) -> TokenStream {
    nodes
        .iter()
        .map(|n| match n {
            Node::Leaf(tt) => tt.clone(),
            Node::Group(d, inner) => TokenTree::Group(Group::new(*d, stream(inner))),
        })
        .collect()
}

/// The paths (indices from the root) of every node, and of every list a
/// node can be inserted into (the root and each group's contents).
fn paths(nodes: &[Node], prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>, lists: &mut Vec<Vec<usize>>) {
    lists.push(prefix.clone());
    for (i, n) in nodes.iter().enumerate() {
        prefix.push(i);
        out.push(prefix.clone());
        if let Node::Group(_, inner) = n {
            paths(inner, prefix, out, lists);
        }
        prefix.pop();
    }
}

/// The list that `path` (to a list) names.
fn list_mut<'a>(nodes: &'a mut Vec<Node>, path: &[usize]) -> &'a mut Vec<Node> {
    match path.split_first() {
        None => nodes,
        Some((&i, rest)) => match &mut nodes[i] {
            Node::Group(_, inner) => list_mut(inner, rest),
            Node::Leaf(_) => unreachable!("a list path goes through groups"),
        },
    }
}

/// The leaf at `path`, if it is one.
fn leaf_at<'a>(nodes: &'a [Node], path: &[usize]) -> Option<&'a TokenTree> {
    let (&first, rest) = path.split_first()?;
    match (&nodes[first], rest.is_empty()) {
        (Node::Leaf(tt), true) => Some(tt),
        (Node::Group(_, inner), false) => leaf_at(inner, rest),
        _ => None,
    }
}

fn idents(nodes: &[Node], out: &mut Vec<String>) {
    for n in nodes {
        match n {
            Node::Leaf(TokenTree::Ident(i)) => out.push(i.to_string()),
            Node::Leaf(_) => {}
            Node::Group(_, inner) => idents(inner, out),
        }
    }
}

fn tokens(s: &str) -> Vec<Node> {
    tree(s.parse().expect("mutation tokens"))
}

/// Applies one random mutation to `nodes`; `names` are the kernel's
/// identifiers. Returns what it did, for the failure message.
fn mutate(nodes: &mut Vec<Node>, names: &[String], rng: &mut Rng) -> String {
    let (mut all, mut lists) = (Vec::new(), Vec::new());
    paths(nodes, &mut Vec::new(), &mut all, &mut lists);
    // Weights: delete 15, duplicate 10, swap 10, identifier 20, literal 30,
    // operator 15 (the replacements keep the syntax, so they reach the
    // compiler with extreme constants more often).
    let kind = match rng.below(100) {
        0..=14 => 0,
        15..=24 => 1,
        25..=34 => 2,
        35..=54 => 3,
        55..=84 => 4,
        _ => 5,
    };
    if all.is_empty() || kind == 5 {
        let list = lists[rng.below(lists.len())].clone();
        let op = OPERATORS[rng.below(OPERATORS.len())];
        let target = list_mut(nodes, &list);
        let at = rng.below(target.len() + 1);
        for (k, n) in tokens(op).into_iter().enumerate() {
            target.insert(at + k, n);
        }
        return format!("insert `{op}` at {list:?}[{at}]");
    }
    let path = all[rng.below(all.len())].clone();
    let (&last, parent) = path.split_last().expect("a node path is not empty");
    match kind {
        0 => {
            list_mut(nodes, parent).remove(last);
            format!("delete {path:?}")
        }
        1 => {
            let list = list_mut(nodes, parent);
            let copy = list[last].clone();
            list.insert(last + 1, copy);
            format!("duplicate {path:?}")
        }
        2 => {
            let list = list_mut(nodes, parent);
            let other = rng.below(list.len());
            list.swap(last, other);
            format!("swap {path:?} with sibling {other}")
        }
        3 => {
            let found: Vec<&Vec<usize>> =
                all.iter().filter(|p| matches!(leaf_at(nodes, p), Some(TokenTree::Ident(_)))).collect();
            if found.is_empty() {
                return "no identifier to replace".into();
            }
            let p = found[rng.below(found.len())].clone();
            let name = &names[rng.below(names.len())];
            let (&l, par) = p.split_last().expect("not empty");
            list_mut(nodes, par)[l] = tokens(name).remove(0);
            format!("replace identifier {p:?} with `{name}`")
        }
        _ => {
            // A literal, else any leaf or group.
            let found: Vec<&Vec<usize>> =
                all.iter().filter(|p| matches!(leaf_at(nodes, p), Some(TokenTree::Literal(_)))).collect();
            let p = if found.is_empty() { path.clone() } else { found[rng.below(found.len())].clone() };
            let value = EXTREMES[rng.below(EXTREMES.len())];
            let (&l, par) = p.split_last().expect("not empty");
            list_mut(nodes, par)[l] = tokens(value).remove(0);
            format!("replace {p:?} with `{value}`")
        }
    }
}

/// One case: the kernel, the mutated attribute and item as text (what
/// replays it), and the mutations.
struct Case {
    seed: u64,
    from: String,
    attr: String,
    item: String,
    mutations: Vec<String>,
}

fn make_case(sources: &[Source], seed: u64) -> Case {
    let mut rng = Rng(seed);
    let src = &sources[rng.below(sources.len())];
    let mut attr = tree(src.attr.clone());
    let mut item = tree(src.item.clone());
    let mut names = Vec::new();
    idents(&attr, &mut names);
    idents(&item, &mut names);
    names.sort();
    names.dedup();
    let mut mutations = Vec::new();
    // One mutation in half the cases, two or three in the rest.
    let count = [1, 1, 1, 2, 2, 3][rng.below(6)];
    for _ in 0..count {
        if rng.below(4) == 0 {
            mutations.push(format!("attribute: {}", mutate(&mut attr, &names, &mut rng)));
        } else {
            mutations.push(format!("item: {}", mutate(&mut item, &names, &mut rng)));
        }
    }
    Case {
        seed,
        from: format!("{} `{}`", src.file, src.name),
        attr: stream(&attr).to_string(),
        item: stream(&item).to_string(),
        mutations,
    }
}

/// What the expansion did with a case.
enum Outcome {
    /// The mutated text is no token stream (an unbalanced mutation cannot
    /// happen, but a literal or punctuation may not re-lex).
    NotTokens,
    Compiled,
    /// The compile errors' messages.
    Errors(Vec<String>),
    Internal(String),
}

std::thread_local! {
    static PANIC_AT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Records where a panic happened on this thread (for the failure
/// message), then runs the previous hook.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let at = info.location().map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            PANIC_AT.with(|p| *p.borrow_mut() = at);
            previous(info);
        }));
    });
}

fn expand_case(attr: &str, item: &str) -> Outcome {
    let (Ok(attr), Ok(item)) = (attr.parse::<TokenStream>(), item.parse::<TokenStream>()) else {
        return Outcome::NotTokens;
    };
    // `TILE_FUZZ_PTXAS=<ptxas>`: also assemble every variant of the cases
    // that compile; a rejection is a code-generation bug.
    let ptxas = std::env::var("TILE_FUZZ_PTXAS").ok().filter(|p| !p.trim().is_empty());
    let env = BuildEnv { ptxas, ..BuildEnv::plain(Target::ALL.to_vec()) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::expand::expand_with(attr, item, &env))) {
        Ok(out) => {
            let out = out.to_string();
            let internal = |m: &str| m.trim_start_matches([' ', '"']).starts_with("internal");
            if out.contains("internal error")
                || out.contains("ptxas rejected")
                || out.split("compile_error ! {").skip(1).any(internal)
            {
                Outcome::Internal(out)
            } else if out.contains("compile_error") {
                let messages =
                    out.split("compile_error ! {").skip(1).map(|m| m.split(" }").next().unwrap_or("").to_string());
                Outcome::Errors(messages.collect())
            } else {
                Outcome::Compiled
            }
        }
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            let at = PANIC_AT.with(|p| p.borrow_mut().take()).unwrap_or_default();
            Outcome::Internal(format!("panic at {at}: {msg}"))
        }
    }
}

/// Runs a case on its own thread (rustc's 8 MiB stack), giving up after
/// [`CASE_LIMIT`]. `Err` is the failure's description.
fn run_case(case: &Case) -> Result<(Outcome, Duration), String> {
    // ptxas takes its own time (a few seconds for the largest kernels).
    let limit = if std::env::var_os("TILE_FUZZ_PTXAS").is_some() { CASE_LIMIT * 12 } else { CASE_LIMIT };
    let (tx, rx) = mpsc::channel();
    let (attr, item) = (case.attr.clone(), case.item.clone());
    let start = Instant::now();
    std::thread::Builder::new()
        .name(format!("fuzz-{}", case.seed))
        .stack_size(8 << 20)
        .spawn(move || {
            let _ = tx.send(expand_case(&attr, &item));
        })
        .expect("spawn a fuzz thread");
    match rx.recv_timeout(limit) {
        Ok(Outcome::Internal(msg)) => Err(format!("internal error: {msg}")),
        Ok(outcome) if start.elapsed() <= limit => Ok((outcome, start.elapsed())),
        Ok(_) => Err(format!("took {:.1} s (limit {} s)", start.elapsed().as_secs_f64(), limit.as_secs())),
        Err(_) => {
            Err(format!("still running after {} s (a hang, or work that grows with a constant)", limit.as_secs()))
        }
    }
}

fn describe(case: &Case, why: &str) -> String {
    format!(
        "seed {} ({}): {why}\n  mutations: {}\n  replay: TILE_FUZZ_SEED={} TILE_FUZZ_CASES=1 cargo test -p tile-macros --lib fuzz -- --nocapture\n  #[tile_kernel({})]\n  {}\n",
        case.seed,
        case.from,
        case.mutations.join("; "),
        case.seed,
        case.attr,
        case.item
    )
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The extraction finds the suite's kernels, and they compile unmutated
/// (so the mutations start from working kernels).
#[test]
fn fuzz_sources_compile_unmutated() {
    install_panic_hook();
    let sources = kernels();
    assert!(sources.len() >= 20, "found only {} kernels", sources.len());
    for src in &sources {
        let case = Case {
            seed: 0,
            from: format!("{} `{}`", src.file, src.name),
            attr: src.attr.to_string(),
            item: src.item.to_string(),
            mutations: Vec::new(),
        };
        match run_case(&case) {
            Ok((Outcome::Compiled, _)) => {}
            Ok((Outcome::Errors(m), _)) => panic!("{}", describe(&case, &format!("does not compile unmutated: {m:?}"))),
            Ok(_) => panic!("{}", describe(&case, "does not compile unmutated")),
            Err(why) => panic!("{}", describe(&case, &why)),
        }
    }
}

#[test]
fn fuzz_mutated_kernels() {
    install_panic_hook();
    let sources = kernels();
    let first = env_u64("TILE_FUZZ_SEED", 0);
    let cases = env_u64("TILE_FUZZ_CASES", DEFAULT_CASES);
    let trace = std::env::var_os("TILE_FUZZ_TRACE").is_some();
    let start = Instant::now();
    let (mut compiled, mut errors, mut not_tokens) = (0u64, 0u64, 0u64);
    let mut slowest = (Duration::ZERO, first);
    let mut failures = Vec::new();
    for seed in first..first + cases {
        let case = make_case(&sources, seed);
        if trace {
            eprintln!("{}", describe(&case, "running"));
        }
        match run_case(&case) {
            Ok((outcome, took)) => {
                if took > slowest.0 {
                    slowest = (took, seed);
                }
                if trace {
                    match &outcome {
                        Outcome::Errors(m) => {
                            eprintln!("  -> {:.2} s, errors: {}", took.as_secs_f64(), m.join("\n     "))
                        }
                        _ => eprintln!("  -> {:.2} s, no errors", took.as_secs_f64()),
                    }
                }
                match outcome {
                    Outcome::Compiled => compiled += 1,
                    Outcome::Errors(_) => errors += 1,
                    Outcome::NotTokens => not_tokens += 1,
                    Outcome::Internal(_) => unreachable!("run_case reports internal errors"),
                }
            }
            Err(why) => {
                let hang = why.starts_with("still running");
                failures.push(describe(&case, &why));
                // A thread that does not stop keeps a core; stop here.
                if hang || failures.len() >= 20 {
                    break;
                }
            }
        }
    }
    eprintln!(
        "fuzz: seeds {first}..{}: {compiled} compiled, {errors} compile errors, {not_tokens} not tokens, {} failures; {:.1} s, slowest case {:.2} s (seed {})",
        first + cases,
        failures.len(),
        start.elapsed().as_secs_f64(),
        slowest.0.as_secs_f64(),
        slowest.1
    );
    assert!(failures.is_empty(), "{} fuzz cases failed:\n{}", failures.len(), failures.join("\n"));
}
