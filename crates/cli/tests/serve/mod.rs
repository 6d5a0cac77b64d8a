//! `dspark serve` on the real pair (SmolLM2-135M-Instruct and the drafter trained for it),
//! driven by the real `openai` Python client (`tests/python/serve_client.py`): chat and
//! text completions, streamed and whole, equal `dspark generate`'s greedy text; eight
//! concurrent streams equal their sequential outputs; a client that goes away frees its
//! slot; every error has its status and OpenAI's shape; the API key guards every endpoint
//! but /health; /metrics counts the speculation; a full queue answers 503 with
//! Retry-After; SIGTERM ends the server cleanly, exit 0, within 5 s.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

const KEY: &str = "test-key-0123";
const N: usize = 24;

/// A running server: killed on drop if the test did not stop it.
struct Server {
    child: Child,
    url: String,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        Server::start_with(args, &[])
    }

    fn start_with(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dspark"))
            .envs(env.iter().copied())
            .arg("serve")
            .args(["--port", "0", "--chat-date", "2026-12-03"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("the server did not start: {:?}", child.try_wait()));
            if let Some(rest) = line.strip_prefix("dspark: listening on ") {
                let url = rest.split_whitespace().next().unwrap().to_string();
                return Server {
                    child,
                    url,
                    stderr: rx,
                };
            }
        }
    }

    /// SIGTERM; the exit status and how long the server took to exit.
    fn terminate(&mut self) -> (std::process::ExitStatus, Duration) {
        let t = Instant::now();
        let o = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .output()
            .unwrap();
        assert!(o.status.success());
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, t.elapsed());
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the server ignored SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(server: &Server, cases: &serde_json::Value, tmp: &Tmp) -> serde_json::Value {
    let path = tmp.path("cases.json");
    std::fs::write(&path, cases.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/serve_client.py");
    let o = Command::new(python())
        .arg(script)
        .args([&server.url, KEY, s(&path)])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): run the README's test command",
                python()
            )
        });
    assert!(
        o.status.success(),
        "serve_client.py failed (is `openai` installed? see README)\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

fn smol_draft(tmp: &Tmp) -> PathBuf {
    let out = tmp.path("draft.gguf");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/smol-pair/draft");
    assert_ok(&dspark(&["convert", s(&src), "-o", s(&out), "-q"]));
    out
}

/// The real pair's server: the target, its drafter converted into `tmp`, two threads, and
/// `extra` flags (slots, key, schedule); `env` for the server's environment.
fn pair_server(tmp: &Tmp, extra: &[&str], env: &[(&str, &str)]) -> (Server, PathBuf, PathBuf) {
    let target = crate::smollm2::smollm2();
    let draft = smol_draft(tmp);
    let mut args = vec!["-m", s(&target), "-md", s(&draft), "-t", "2"];
    args.extend_from_slice(extra);
    let server = Server::start_with(&args, env);
    (server, target, draft)
}

fn heldout(n: usize) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/smol-pair/heldout.jsonl"),
    )
    .unwrap();
    text.lines()
        .take(n)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["messages"].clone())
        .collect()
}

/// `generate --chat --json`'s reply to `messages`, and its token count.
fn generate_chat(
    target: &Path,
    draft: &Path,
    messages: &serde_json::Value,
    tmp: &Tmp,
) -> (String, usize) {
    let f = tmp.path("messages.json");
    std::fs::write(&f, messages.to_string()).unwrap();
    let n = N.to_string();
    let v = dspark_json(&[
        "generate",
        "-m",
        s(target),
        "-md",
        s(draft),
        "--messages",
        s(&f),
        "-n",
        &n,
        "--json",
        "--chat-date",
        "2026-12-03",
    ]);
    (
        v["text"].as_str().unwrap().to_string(),
        v["tokens"].as_array().unwrap().len(),
    )
}

fn assert_error(name: &str, got: &serde_json::Value, status: u64, param: Option<&str>) {
    assert_eq!(got[0], status, "{name}: {got}");
    let body: serde_json::Value = serde_json::from_str(got[1].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{name}: the body is not JSON ({e}): {got}"));
    let e = &body["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{name}: {body}"
    );
    assert!(e["type"].is_string(), "{name}: {body}");
    assert_eq!(e["code"], status, "{name}: {body}");
    assert!(
        e.as_object().unwrap().contains_key("param"),
        "{name}: {body}"
    );
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{name}: {body}");
    }
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn serve_answers_openai_clients_as_generate_does() {
    let tmp = Tmp::new();
    let chats = heldout(3);
    let long = serde_json::json!([{"role": "user", "content": "Count from 1 to 1000, one number per line."}]);
    let texts = ["The capital of France is", "def fibonacci(n):"];
    let (mut server, target, draft) = pair_server(&tmp, &["-np", "4", "--api-key", KEY], &[]);
    let cases = serde_json::json!({
        "chat": chats, "text": texts, "max_tokens": N, "concurrent": 8, "long": long,
    });
    let got = client(&server, &cases, &tmp);

    // Chat at T = 0: whole, streamed and generate's replies are one text.
    let mut expected = Vec::new();
    for (i, m) in chats.iter().enumerate() {
        let (text, tokens) = generate_chat(&target, &draft, m, &tmp);
        let c = &got["chat"][i];
        assert_eq!(c["whole"], text.as_str(), "chat {i}");
        assert_eq!(c["stream"], text.as_str(), "chat {i} streamed");
        assert_eq!(c["usage"]["completion_tokens"], tokens, "chat {i}");
        assert_eq!(c["stream_usage"], c["usage"], "chat {i}");
        let finish = if tokens < N { "stop" } else { "length" };
        assert_eq!(c["finish"], finish, "chat {i}");
        assert_eq!(c["stream_finish"], finish, "chat {i}");
        let t = &c["timings"];
        assert_eq!(t["predicted_n"], tokens, "{t}");
        assert!(
            t["draft_n"].as_u64().is_some() && t["draft_n_accepted"].as_u64().is_some(),
            "{t}"
        );
        expected.push(text);
    }
    // Eight streams at once: each equals its sequential output.
    for (i, text) in got["concurrent"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            text,
            expected[i % expected.len()].as_str(),
            "concurrent stream {i}"
        );
    }
    // Text completions: generate's plain prompt.
    for (i, p) in texts.iter().enumerate() {
        let n = N.to_string();
        let v = dspark_json(&[
            "generate",
            "-m",
            s(&target),
            "-md",
            s(&draft),
            "-p",
            p,
            "-n",
            &n,
            "--json",
        ]);
        assert_eq!(got["text"][i]["whole"], v["text"], "text {i}");
        assert_eq!(got["text"][i]["stream"], v["text"], "text {i} streamed");
    }
    // A client that leaves frees its slot.
    assert_eq!(
        got["disconnect"]["processing_during"], 1.0,
        "{}",
        got["disconnect"]
    );
    assert_eq!(
        got["disconnect"]["processing_after"], 0.0,
        "{}",
        got["disconnect"]
    );
    // Errors: status and shape.
    let e = &got["errors"];
    for (name, status, param) in [
        ("bad_json", 400, None),
        ("no_messages", 400, Some("messages")),
        ("messages_not_array", 400, Some("messages")),
        ("n_2", 400, Some("n")),
        ("client_n_3", 400, Some("n")),
        ("bad_temperature", 400, Some("temperature")),
        ("too_long", 400, Some("max_tokens")),
        ("bad_token", 400, Some("prompt")),
        ("no_such_path", 404, None),
        ("no_key", 401, None),
        ("wrong_key", 401, None),
        ("too_large", 413, None),
        ("declared_too_large", 413, None),
        ("conflicting_max", 400, Some("n_predict")),
        ("tools_type", 400, Some("tools")),
        ("long_text", 400, Some("messages")),
    ] {
        assert_error(name, &e[name], status, param);
    }
    assert_eq!(e["health_no_key"][0], 200, "{}", e["health_no_key"]);
    assert_error("page_no_key", &e["page_no_key"], 401, None);
    assert_eq!(e["page_query_key"][0], 200, "the page opens with ?key=");
    // llama-server's auxiliary endpoints.
    assert_eq!(
        got["models"]["data"][0]["id"],
        "SmolLM2-135M-Instruct.Q4_1.gguf"
    );
    assert_eq!(
        got["tokenize"]["tokens"][1]["piece"], " world",
        "{}",
        got["tokenize"]
    );
    assert_eq!(got["detokenize"]["content"], "Hello world");
    let rendered = got["apply_template"]["prompt"].as_str().unwrap();
    assert!(rendered.ends_with("<|im_start|>assistant\n"), "{rendered}");
    // Metrics count what was served.
    let m = got["metrics"].as_str().unwrap();
    let drafts = metric(m, "llamacpp:spec_decode_num_drafts_total");
    let accepted = metric(m, "llamacpp:spec_decode_num_accepted_tokens_total");
    let per_pos: f64 = m
        .lines()
        .filter(|l| l.starts_with("llamacpp:spec_decode_num_accepted_tokens_per_pos_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(drafts > 0.0, "{m}");
    assert_eq!(per_pos, accepted, "{m}");
    assert!(metric(m, "llamacpp:spec_decode_num_draft_tokens_total") >= accepted);
    assert!(metric(m, "llamacpp:prompt_tokens_total") > 0.0);
    let served: u64 = got["chat"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| 2 * c["usage"]["completion_tokens"].as_u64().unwrap())
        .sum();
    assert!(
        metric(m, "llamacpp:tokens_predicted_total") >= served as f64,
        "{m}"
    );
    // The concurrent streams' steps ran batched: some forwards held several slots.
    let forwards = metric(m, "dspark:batched_forwards_total");
    assert!(forwards > 0.0, "{m}");
    assert!(
        metric(m, "dspark:batched_forward_slots_total") > forwards,
        "{m}"
    );
    assert!(metric(m, "llamacpp:n_busy_slots_per_decode") > 1.0, "{m}");
    assert_eq!(metric(m, "llamacpp:requests_processing"), 0.0);
    assert_eq!(metric(m, "llamacpp:requests_deferred"), 0.0);

    // SIGTERM: a clean exit, 0, within 5 s.
    let (status, took) = server.terminate();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let log: Vec<String> = server.stderr.try_iter().collect();
    assert!(log.iter().any(|l| l.contains("shutting down")), "{log:?}");
}

#[test]
fn a_full_queue_answers_503_and_nothing_is_lost() {
    let tmp = Tmp::new();
    let target = crate::smollm2::smollm2();
    let server = Server::start(&[
        "-m",
        s(&target),
        "-np",
        "1",
        "--queue",
        "1",
        "-t",
        "1",
        "--api-key",
        KEY,
    ]);
    let long = serde_json::json!([{"role": "user", "content": "Count from 1 to 1000, one number per line."}]);
    let got = client(&server, &serde_json::json!({"busy": 4, "long": long}), &tmp);
    let results = got["results"].as_array().unwrap();
    let ok = results.iter().filter(|r| r[0] == 200).count();
    let busy: Vec<_> = results.iter().filter(|r| r[0] == 503).collect();
    assert_eq!(ok + busy.len(), 4, "every request answered: {got}");
    assert!(
        ok >= 2,
        "the running request and the queued one are served: {got}"
    );
    assert!(!busy.is_empty(), "beyond the queue: 503: {got}");
    for r in &busy {
        assert_error("busy", &serde_json::json!([r[0], r[1]]), 503, None);
        assert_eq!(r[2], "1", "Retry-After: {r}");
    }
    // Served whole: the same greedy reply each time, up to the 256 tokens asked for.
    let served: Vec<serde_json::Value> = results
        .iter()
        .filter(|r| r[0] == 200)
        .map(|r| serde_json::from_str(r[1].as_str().unwrap()).unwrap())
        .collect();
    for v in &served {
        let n = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert!((1..=256).contains(&n), "{v}");
        assert_eq!(v["choices"], served[0]["choices"], "{v}");
    }
    assert_eq!(got["deferred_after"], 0.0);
    assert_eq!(got["processing_after"], 0.0);
    assert_eq!(got["rejected"], busy.len() as f64);
}

/// The chat page at `/`, in headless Chromium (Debian's package, `scripts/test.sh` installs
/// it): two turns sent as a person sends them; the replies stream into the page, the first
/// equal to `generate --chat`'s, the pieces from accepted drafts marked (and coloured) apart
/// from the target's own, the speed and the acceptance shown; a screenshot of it all.
#[test]
fn the_chat_page_holds_a_conversation_in_chromium() {
    let tmp = Tmp::new();
    // Every step drafts (`fixed`), so that accepted drafts show whatever the schedule learnt.
    let (server, target, draft) = pair_server(
        &tmp,
        &["-np", "2", "--api-key", KEY, "--schedule", "fixed"],
        &[],
    );
    let first = "Give me three tips for sleeping better.";
    let url = format!(
        "{}/?key={KEY}&max=48&ask=Give%20me%20three%20tips%20for%20sleeping%20better.&ask=And%20one%20more%3F",
        server.url
    );
    let shot = tmp.path("page.png");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/page_check.py");
    let chromium = std::env::var("DSPARK_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let o = Command::new(python())
        .arg(script)
        .args([&url, s(&shot), "--chromium", &chromium])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "page_check.py failed (is Chromium installed? scripts/test.sh installs Debian's)\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let page: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(page["turns"], "2", "{page}");
    let m = page["messages"].as_array().unwrap();
    assert_eq!(m.len(), 4, "{page}");
    assert_eq!(m[0]["role"], "user");
    assert_eq!(m[0]["text"], first);
    let messages = serde_json::json!([{"role": "user", "content": first}]);
    let f = tmp.path("m.json");
    std::fs::write(&f, messages.to_string()).unwrap();
    let want = dspark_json(&[
        "generate",
        "-m",
        s(&target),
        "-md",
        s(&draft),
        "--messages",
        s(&f),
        "-n",
        "48",
        "--json",
        "--chat-date",
        "2026-12-03",
    ]);
    assert_eq!(m[1]["text"], want["text"], "{page}");
    for r in [&m[1], &m[3]] {
        assert_eq!(r["role"], "assistant");
        assert_eq!(r["done"], "1", "{page}");
        assert!(r["error"].is_null(), "{page}");
        assert!(!r["text"].as_str().unwrap().is_empty(), "{page}");
        let stats = r["stats"].as_str().unwrap();
        assert!(
            stats.contains("tok/s") && stats.contains("drafts accepted"),
            "{stats}"
        );
    }
    // Pieces from accepted drafts are marked, and coloured apart.
    assert!(m[1]["drafted"].as_u64().unwrap() > 0, "{page}");
    assert!(m[1]["target"].as_u64().unwrap() > 0, "{page}");
    assert_eq!(page["drafted_style"], "rgb(215, 245, 221)", "{page}");
    assert_eq!(page["legend"], true);
    // The screenshot: a PNG of the window, with something drawn in it.
    assert_eq!(page["screenshot"]["width"], 1000, "{page}");
    assert!(
        page["screenshot"]["bytes"].as_u64().unwrap() > 20_000,
        "{page}"
    );
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

/// A bounded load: 192 streamed requests at concurrency 16 on 4 slots (a queue of 64): every
/// one answered in full, the replies at T = 0 those of the same conversation served alone,
/// and the server's memory flat (the second half of the run never above the first's peak by
/// more than a few per cent).
#[test]
fn a_load_of_192_requests_loses_none_and_memory_stays_flat() {
    let tmp = Tmp::new();
    let (server, _, _) = pair_server(&tmp, &["-np", "4"], &[]);
    let prompts = tmp.path("prompts.jsonl");
    let lines: Vec<String> = heldout(12)
        .into_iter()
        .map(|m| serde_json::json!({ "messages": m }).to_string())
        .collect();
    std::fs::write(&prompts, lines.join("\n") + "\n").unwrap();
    let load = |requests: &str, concurrency: &str| -> serde_json::Value {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/load.py");
        let pid = server.child.id().to_string();
        let o = Command::new(python())
            .arg(&script)
            .arg(&server.url)
            .args(["--requests", requests, "--concurrency", concurrency])
            .args([
                "--messages",
                s(&prompts),
                "--max-tokens",
                "8",
                "--pid",
                &pid,
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let alone = load("12", "1");
    let got = load("192", "16");
    assert_eq!(got["ok"], 192, "{}", got["failed"]);
    let texts = got["texts"].as_array().unwrap();
    let want = alone["texts"].as_array().unwrap();
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(t, &want[i % want.len()], "request {i}");
    }
    let rss = &got["rss_kib"];
    let (first, second) = (
        rss["max_first_half"].as_f64().unwrap(),
        rss["max_second_half"].as_f64().unwrap(),
    );
    assert!(second <= first * 1.05 + 8192.0, "memory grew: {rss}");
}

/// A request that panics inside its slot costs only itself: a 500 in OpenAI's shape (an
/// error event when streamed), counted, and the next requests are served; and sampled
/// requests with a seed give the same tokens eight at a time as alone (the plan fixed).
#[test]
fn a_panic_costs_one_request_and_seeds_hold_under_load() {
    let tmp = Tmp::new();
    let (server, _, _) = pair_server(
        &tmp,
        &["-np", "4", "--schedule", "fixed", "--api-key", KEY],
        &[("DSPARK_FAULT_INJECTION", "1")],
    );
    let cases = serde_json::json!({
        "robust": true, "chat": heldout(4), "max_tokens": 16,
        "fault": "<<dspark: panic here>>",
    });
    let got = client(&server, &cases, &tmp);
    assert_error("fault", &got["fault_whole"], 500, None);
    let streamed = got["fault_stream"][1].as_str().unwrap();
    assert!(streamed.contains("\"server_error\""), "{streamed}");
    assert_eq!(got["after"][0], 200, "{}", got["after"]);
    assert_eq!(got["health"], 200);
    assert_eq!(got["failed"], 2.0);
    assert_eq!(got["processing"], 0.0);
    assert_eq!(got["alone"], got["together"], "seeded sampling under load");
    let alone = got["alone"].as_array().unwrap();
    assert!(
        alone.iter().any(|t| t != &alone[0]),
        "different seeds, different samples: {alone:?}"
    );
}

/// Connections that hold without asking: one that sends nothing is closed once the header
/// deadline passes (10 s), and beyond `--max-connections` a connection is answered 503 with
/// Retry-After and closed, while the server goes on answering.
#[test]
fn idle_and_surplus_connections_are_closed_not_kept() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let target = crate::smollm2::smollm2();
    let server = Server::start(&[
        "-m",
        s(&target),
        "-np",
        "1",
        "-t",
        "1",
        "--max-connections",
        "2",
    ]);
    let addr = server.url.trim_start_matches("http://").to_string();
    let started = Instant::now();
    let mut idle = TcpStream::connect(&addr).unwrap();
    let _second = TcpStream::connect(&addr).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The third: refused in words.
    let mut third = TcpStream::connect(&addr).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = String::new();
    third.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(answer.contains("\"unavailable_error\""), "{answer}");
    // The idle one: closed by the server after the header deadline.
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    let n = idle.read_to_end(&mut rest).unwrap_or(0);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(16),
        "{waited:?}, {n} bytes"
    );
    drop(idle);
    drop(_second);
    std::thread::sleep(Duration::from_millis(300));
    // And the server still answers.
    let mut ok = TcpStream::connect(&addr).unwrap();
    ok.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut health = String::new();
    ok.read_to_string(&mut health).unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
}
