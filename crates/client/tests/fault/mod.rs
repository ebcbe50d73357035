//! A scriptable HTTP/1.1 server on loopback for fault injection: each
//! accepted connection plays the next script (reset, an error status, an
//! SSE head with a close-delimited or chunked body, events, stalls, cuts,
//! hangs) and records what the client sent and when it went away. Times
//! are tokio's, so tests run on a paused clock.

#![allow(dead_code)]

use serde_json::json;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub enum Step {
    /// Read the request, then reset the connection (RST, no response).
    Reset,
    /// A whole response, then close.
    Status(u16, Vec<(&'static str, String)>, String),
    /// `200 text/event-stream`; the body is chunked or ends at close.
    Head { chunked: bool },
    /// Raw SSE text (one HTTP chunk when chunked).
    Send(String),
    /// Wait, noticing a client that leaves.
    Sleep(Duration),
    /// The chunked body's terminator.
    End,
    /// Drop the connection here (a chunked body is cut short).
    Close,
    /// Wait until the client closes.
    Hang,
}

#[derive(Debug, Clone)]
pub struct Record {
    pub accepted: Instant,
    pub head: String,
    pub body: String,
    /// When the client closed the connection, if it did while we waited.
    pub client_closed: Option<Instant>,
    /// When each `Send` step went out.
    pub sent: Vec<Instant>,
}

impl Record {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    pub fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or("")
    }
}

pub struct Server {
    pub addr: SocketAddr,
    pub records: Arc<Mutex<Vec<Record>>>,
}

impl Server {
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn records(&self) -> Vec<Record> {
        self.records.lock().unwrap().clone()
    }

    /// Serves `scripts[i]` to the i-th connection; later connections get a 500.
    pub async fn start(scripts: Vec<Vec<Step>>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let records = Arc::new(Mutex::new(Vec::new()));
        let recs = records.clone();
        tokio::spawn(async move {
            let mut scripts = scripts.into_iter();
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let script = scripts.next().unwrap_or_else(|| {
                    vec![Step::Status(
                        500,
                        vec![],
                        r#"{"error":{"message":"unscripted","type":"server_error"}}"#.into(),
                    )]
                });
                let recs = recs.clone();
                tokio::spawn(async move { play(sock, script, recs).await });
            }
        });
        Server { addr, records }
    }
}

async fn read_request(sock: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).into_owned();
    Some((head, body))
}

/// Waits up to `d` (forever when `None`) for the client to close; true if it did.
async fn client_leaves(sock: &mut TcpStream, d: Option<Duration>) -> bool {
    let mut tmp = [0u8; 1024];
    let closed = async {
        loop {
            match sock.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    match d {
        Some(d) => tokio::time::timeout(d, closed).await.is_ok(),
        None => {
            closed.await;
            true
        }
    }
}

async fn play(mut sock: TcpStream, script: Vec<Step>, recs: Arc<Mutex<Vec<Record>>>) {
    let accepted = Instant::now();
    let Some((head, body)) = read_request(&mut sock).await else {
        return;
    };
    let idx = {
        let mut r = recs.lock().unwrap();
        r.push(Record {
            accepted,
            head,
            body,
            client_closed: None,
            sent: Vec::new(),
        });
        r.len() - 1
    };
    let mut chunked = false;
    for step in script {
        match step {
            Step::Reset => {
                // A zero linger makes the close an RST; with zero it does not block.
                #[allow(deprecated)]
                let _ = sock.set_linger(Some(Duration::ZERO));
                return;
            }
            Step::Status(code, headers, body) => {
                let mut resp = format!(
                    "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    resp.push_str(&format!("{k}: {v}\r\n"));
                }
                resp.push_str("\r\n");
                resp.push_str(&body);
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
                return;
            }
            Step::Head { chunked: c } => {
                chunked = c;
                let te = if c {
                    "transfer-encoding: chunked\r\n"
                } else {
                    "connection: close\r\n"
                };
                let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n{te}\r\n");
                if sock.write_all(resp.as_bytes()).await.is_err() {
                    return;
                }
            }
            Step::Send(text) => {
                let bytes = if chunked {
                    format!("{:x}\r\n{text}\r\n", text.len())
                } else {
                    text
                };
                recs.lock().unwrap()[idx].sent.push(Instant::now());
                if sock.write_all(bytes.as_bytes()).await.is_err() {
                    recs.lock().unwrap()[idx].client_closed = Some(Instant::now());
                    return;
                }
            }
            Step::Sleep(d) => {
                if client_leaves(&mut sock, Some(d)).await {
                    recs.lock().unwrap()[idx].client_closed = Some(Instant::now());
                    return;
                }
            }
            Step::End => {
                let _ = sock.write_all(b"0\r\n\r\n").await;
            }
            Step::Close => return,
            Step::Hang => {
                client_leaves(&mut sock, None).await;
                recs.lock().unwrap()[idx].client_closed = Some(Instant::now());
                return;
            }
        }
    }
}

// Events in the shape OpenAI sends them.

fn event(id: Option<usize>, v: serde_json::Value) -> String {
    match id {
        Some(i) => format!("id: {i}\ndata: {v}\n\n"),
        None => format!("data: {v}\n\n"),
    }
}

pub fn role() -> String {
    event(
        None,
        json!({"id":"c","object":"chat.completion.chunk","created":0,"model":"m",
               "choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}),
    )
}

pub fn text(t: &str) -> String {
    text_with(None, t, None)
}

/// A content event, with an SSE id and the running `usage` some servers
/// put on every chunk.
pub fn text_with(id: Option<usize>, t: &str, completion_tokens: Option<u64>) -> String {
    let mut v = json!({"id":"c","object":"chat.completion.chunk","created":0,"model":"m",
                       "choices":[{"index":0,"delta":{"content":t},"finish_reason":null}]});
    if let Some(n) = completion_tokens {
        v["usage"] = json!({"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n});
    }
    event(id, v)
}

pub fn finish(id: Option<usize>, reason: &str) -> String {
    event(
        id,
        json!({"id":"c","object":"chat.completion.chunk","created":0,"model":"m",
               "choices":[{"index":0,"delta":{},"finish_reason":reason}]}),
    )
}

pub fn usage(prompt: u64, completion: u64) -> String {
    event(
        None,
        json!({"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[],
               "usage":{"prompt_tokens":prompt,"completion_tokens":completion,"total_tokens":prompt+completion}}),
    )
}

pub fn done() -> String {
    "data: [DONE]\n\n".into()
}

pub fn error_json(message: &str, kind: &str) -> String {
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}}).to_string()
}
