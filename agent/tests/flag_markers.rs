//! Flag-name encoding (§9.3, §16 Q11) against outputs recorded from Python
//! (`tests/fixtures/markers/record_markers.py`), plus property tests.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use nodewright_agent::flags::marker;
use nodewright_agent::pyrepr::{repr_int_list, repr_str, repr_str_list};
use proptest::prelude::*;

#[derive(Debug)]
struct Case {
    arguments: Vec<String>,
    returncodes: Vec<i64>,
    text: String,
    marker: String,
}

fn recorded() -> Vec<Case> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/markers/recorded.jsonl"
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Case {
                arguments: serde_json::from_value(v["arguments"].clone()).unwrap(),
                returncodes: serde_json::from_value(v["returncodes"].clone()).unwrap(),
                text: v["text"].as_str().unwrap().to_string(),
                marker: v["marker"].as_str().unwrap().to_string(),
            }
        })
        .collect()
}

#[test]
fn markers_match_every_recorded_python_output() {
    let cases = recorded();
    assert!(cases.len() > 500);
    let wrong: Vec<String> = cases
        .iter()
        .filter(|c| marker(&c.arguments, &c.returncodes) != c.marker)
        .map(|c| {
            format!(
                "{:?}: python {:?}, ours {:?}",
                c.arguments,
                c.text,
                format!(
                    "{}_{}",
                    repr_str_list(&c.arguments),
                    repr_int_list(&c.returncodes)
                )
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} recorded markers differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn recorded_cases_cover_quotes_backslashes_non_ascii_and_slash_markers() {
    let cases = recorded();
    let any = |f: &dyn Fn(&Case) -> bool| cases.iter().any(f);
    assert!(any(&|c| c
        .arguments
        .iter()
        .any(|a| a.contains('\'') && !a.contains('"'))));
    assert!(any(&|c| c
        .arguments
        .iter()
        .any(|a| a.contains('\'') && a.contains('"'))));
    assert!(any(&|c| c.arguments.iter().any(|a| a.contains('\\'))));
    assert!(any(&|c| c
        .arguments
        .iter()
        .any(|a| a.chars().any(|ch| ch as u32 > 0xffff))));
    assert!(any(&|c| c.marker.contains('/')));
}

/// Parses a Python string literal as `repr` writes it (test oracle for round trips).
fn parse_py_literal(lit: &str) -> Option<String> {
    let mut chars = lit.chars();
    let quote = chars.next()?;
    let body: Vec<char> = chars.collect();
    if body.last() != Some(&quote) {
        return None;
    }
    let body = &body[..body.len() - 1];
    let mut out = String::new();
    let mut i = 0;
    let hex = |s: &[char]| {
        u32::from_str_radix(&s.iter().collect::<String>(), 16)
            .ok()
            .and_then(char::from_u32)
    };
    while i < body.len() {
        let c = body[i];
        if c == quote {
            return None; // unescaped quote inside
        }
        if c != '\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = *body.get(i + 1)?;
        let (ch, len) = match e {
            '\\' => ('\\', 2),
            '\'' => ('\'', 2),
            '"' => ('"', 2),
            'n' => ('\n', 2),
            'r' => ('\r', 2),
            't' => ('\t', 2),
            'x' => (hex(body.get(i + 2..i + 4)?)?, 4),
            'u' => (hex(body.get(i + 2..i + 6)?)?, 6),
            'U' => (hex(body.get(i + 2..i + 10)?)?, 10),
            _ => return None,
        };
        out.push(ch);
        i += len;
    }
    Some(out)
}

proptest! {
    #[test]
    fn repr_round_trips_through_a_python_literal_parser(s in any::<String>()) {
        let r = repr_str(&s);
        prop_assert_eq!(parse_py_literal(&r), Some(s.clone()), "repr {:?}", r);
    }

    #[test]
    fn repr_quotes_like_python(s in "[a-z'\" \\\\]{0,12}") {
        let r = repr_str(&s);
        let double = s.contains('\'') && !s.contains('"');
        prop_assert_eq!(r.starts_with('"'), double, "{:?} -> {:?}", s, r);
        prop_assert!(!r.contains('\n') && !r.contains('\r') && !r.contains('\t'));
    }

    #[test]
    fn marker_is_padded_base64_of_the_list_reprs(
        args in proptest::collection::vec(any::<String>(), 0..4),
        codes in proptest::collection::vec(any::<i64>(), 1..4),
    ) {
        let m = marker(&args, &codes);
        prop_assert_eq!(m.len() % 4, 0);
        let text = String::from_utf8(STANDARD.decode(&m).unwrap()).unwrap();
        prop_assert_eq!(text, format!("{}_{}", repr_str_list(&args), repr_int_list(&codes)));
    }

    #[test]
    fn markers_differ_when_arguments_or_codes_differ(
        a in proptest::collection::vec("[ -~]{0,6}", 0..3),
        b in proptest::collection::vec("[ -~]{0,6}", 0..3),
        c in proptest::collection::vec(-3i64..3, 1..3),
        d in proptest::collection::vec(-3i64..3, 1..3),
    ) {
        prop_assert_eq!(marker(&a, &c) == marker(&b, &d), a == b && c == d);
    }
}

/// Finds a Python to compare with: `python3.13` (the upstream agent's runtime: every character
/// can be compared) or any `python3` (only characters whose printability is the same in every
/// Unicode version).
fn live_python() -> Option<(String, bool)> {
    let home = std::env::var("HOME").unwrap_or_default();
    let candidates = [
        "python3.13".to_string(),
        format!("{home}/.pyenv/versions/3.13.0/bin/python3"),
        "python3".to_string(),
    ];
    candidates.into_iter().find_map(|py| {
        let out = std::process::Command::new(&py)
            .args(["-c", "import sys; print(sys.version_info[:2] == (3, 13))"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| (py, String::from_utf8_lossy(&out.stdout).trim() == "True"))
    })
}

/// Live comparison with a local Python, when one is installed (the recorded table above is the
/// guarantee; this widens it to fresh random inputs).
#[test]
fn markers_match_live_python_for_random_arguments() {
    let Some((python, exact)) = live_python() else {
        println!("SKIP markers_match_live_python_for_random_arguments: no python3");
        return;
    };
    println!("comparing markers with {python} (all characters: {exact})");
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let stable = prop_oneof![
        4 => proptest::char::range(' ', '~'),
        1 => proptest::char::range('\0', '\u{1f}'),
        1 => proptest::char::range('\u{7f}', '\u{ff}'),
        1 => prop::sample::select(vec!['\u{200b}', '\u{2028}', '\u{3000}', '\u{65e5}', '\u{e000}', '\u{feff}', '\u{1f600}', '\u{20ac}']),
    ];
    let ch = if exact {
        // Any scalar value, weighted towards ASCII so lists stay readable.
        prop_oneof![2 => proptest::char::range(' ', '~'), 3 => any::<char>()].boxed()
    } else {
        stable.boxed()
    };
    let strat = (
        proptest::collection::vec(
            proptest::collection::vec(ch, 0..10).prop_map(|v| v.into_iter().collect::<String>()),
            0..4,
        ),
        proptest::collection::vec(-200i64..200, 1..3),
    );
    let cases: Vec<(Vec<String>, Vec<i64>)> = (0..500)
        .map(|_| strat.new_tree(&mut runner).unwrap().current())
        .collect();
    let input = serde_json::to_string(&cases).unwrap();
    let script = "import sys, json, base64\nfor a, c in json.load(sys.stdin):\n    print(base64.b64encode(f'{a}_{c}'.encode()).decode())";
    let mut child = std::process::Command::new(&python)
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let want: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        want.len(),
        cases.len(),
        "{python} produced {} markers",
        want.len()
    );
    for ((args, codes), want) in cases.iter().zip(&want) {
        assert_eq!(
            &marker(args, codes),
            want,
            "{python}: arguments {args:?} codes {codes:?}"
        );
    }
}
