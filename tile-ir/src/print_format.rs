//! The format strings of the debug print ([`crate::StmtKind::Print`]): one
//! parser for the frontend, the verifier, the interpreter and the PTX
//! lowering, so that all four agree on what a string means.
//!
//! A format is text with one placeholder per argument: `{}` (floats as C's
//! `%f`, integers in decimal) or `{:e}` (floats as C's `%e`); `{{` and `}}`
//! are braces. Guarantees: [`parse`] accepts exactly these and says what is
//! wrong otherwise; [`render`] (the interpreter) prints what `vprintf` prints
//! for the [`c_format`] of the same pieces (floats are passed as f64; NaN
//! prints as `nan`, where the GPU may print `-nan`). Every printed line ends
//! with a newline that the format does not write.

use crate::ir::{DType, Value};

/// A piece of a format string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Literal text.
    Text(String),
    /// An argument: `{}` (`exp == false`) or `{:e}`.
    Arg {
        /// Whether the placeholder is `{:e}` (scientific notation).
        exp: bool,
    },
}

/// Splits a format string into text and placeholders.
pub fn parse(format: &str) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut it = format.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '{' if it.peek() == Some(&'{') => {
                it.next();
                text.push('{');
            }
            '}' if it.peek() == Some(&'}') => {
                it.next();
                text.push('}');
            }
            '{' => {
                let mut spec = String::new();
                loop {
                    match it.next() {
                        Some('}') => break,
                        Some(c) => spec.push(c),
                        None => return Err("unclosed `{` in the format string (write `{{` for a brace)".into()),
                    }
                }
                let exp = match spec.as_str() {
                    "" => false,
                    ":e" => true,
                    other => {
                        return Err(format!(
                            "unsupported placeholder `{{{other}}}`; a print supports `{{}}` and `{{:e}}` (floats in scientific notation)"
                        ))
                    }
                };
                if !text.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut text)));
                }
                out.push(Piece::Arg { exp });
            }
            '}' => return Err("unmatched `}` in the format string (write `}}` for a brace)".into()),
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// The number of placeholders of parsed pieces.
pub fn arg_count(pieces: &[Piece]) -> usize {
    pieces.iter().filter(|p| matches!(p, Piece::Arg { .. })).count()
}

/// Whether a value of `t` can be printed (every scalar type).
pub fn printable(t: DType) -> bool {
    matches!(t, DType::F16 | DType::BF16 | DType::F32 | DType::I32 | DType::U32 | DType::I64 | DType::Bool)
}

/// The C format of `vprintf` for the pieces and the argument types, with
/// the final newline: `%f`/`%e` for floats (passed as f64), `%d` for i32 and
/// bool (passed as s32), `%u` for u32, `%lld` for i64; `%` escaped.
pub fn c_format(pieces: &[Piece], types: &[DType]) -> String {
    let mut out = String::new();
    let mut t = types.iter();
    for p in pieces {
        match p {
            Piece::Text(s) => out.push_str(&s.replace('%', "%%")),
            Piece::Arg { exp } => out.push_str(match t.next() {
                Some(DType::F16 | DType::BF16 | DType::F32) => {
                    if *exp {
                        "%e"
                    } else {
                        "%f"
                    }
                }
                Some(DType::U32) => "%u",
                Some(DType::I64) => "%lld",
                _ => "%d",
            }),
        }
    }
    out.push('\n');
    out
}

/// The line the interpreter prints (with its newline), as `vprintf` would.
pub fn render(pieces: &[Piece], values: &[Value]) -> String {
    let mut out = String::new();
    let mut v = values.iter();
    for p in pieces {
        match p {
            Piece::Text(s) => out.push_str(s),
            Piece::Arg { exp } => {
                let Some(x) = v.next() else { break };
                match *x {
                    Value::F32(f) => out.push_str(&c_float(f as f64, *exp)),
                    Value::F16(h) => out.push_str(&c_float(h.to_f64(), *exp)),
                    Value::BF16(h) => out.push_str(&c_float(h.to_f64(), *exp)),
                    Value::I32(i) => out.push_str(&i.to_string()),
                    Value::U32(u) => out.push_str(&u.to_string()),
                    Value::I64(i) => out.push_str(&i.to_string()),
                    Value::Bool(b) => out.push_str(if b { "1" } else { "0" }),
                }
            }
        }
    }
    out.push('\n');
    out
}

/// C's `%f` (`exp == false`) or `%e` of a double.
fn c_float(x: f64, exp: bool) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if !exp {
        return format!("{x:.6}");
    }
    // Rust writes `1.500000e0`; C writes `1.500000e+00`.
    let s = format!("{x:.6e}");
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', e),
            };
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_placeholders_and_braces() {
        let p = parse("m = {} {{x}} {:e}%").unwrap();
        assert_eq!(
            p,
            vec![
                Piece::Text("m = ".into()),
                Piece::Arg { exp: false },
                Piece::Text(" {x} ".into()),
                Piece::Arg { exp: true },
                Piece::Text("%".into())
            ]
        );
        assert_eq!(c_format(&p, &[DType::F32, DType::F16]), "m = %f {x} %e%%\n");
        assert!(parse("{").is_err());
        assert!(parse("}").is_err());
        assert!(parse("{:x}").unwrap_err().contains("{:x}"));
    }

    #[test]
    fn renders_as_c_printf() {
        let p = parse("{} {:e} {} {} {}").unwrap();
        let line =
            render(&p, &[Value::F32(1.5), Value::F32(-0.00125), Value::I32(-3), Value::U32(7), Value::Bool(true)]);
        assert_eq!(line, "1.500000 -1.250000e-03 -3 7 1\n");
        assert_eq!(c_float(1e300, true), "1.000000e+300");
        assert_eq!(c_float(f64::NEG_INFINITY, false), "-inf");
    }
}
