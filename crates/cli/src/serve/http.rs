//! The connection loop: hyper's HTTP/1 server under the router, with the limits axum's own
//! `serve` leaves out — a deadline for a request's headers (a client that opens connections
//! and sends nothing, or its headers a byte at a time, holds one for at most
//! [`HEADER_TIMEOUT`]), at most `--max-connections` ([`MAX_CONNECTIONS`]) open at once (beyond them a connection
//! is answered 503 with `Retry-After` and closed, not dropped), and a graceful end: on the
//! stop signal the listener closes, open connections are still answered (503 for new
//! requests) while requests run, then closed as their last requests end.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// The most connections open at once, unless `--max-connections` says otherwise.
pub const MAX_CONNECTIONS: usize = 512;

/// How long a client has to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `stop` resolves; then takes no new connections but
/// keeps serving the open ones (their new requests are answered 503 by the router) until
/// `drained` resolves (no request left running), then closes them as their requests end.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    max_connections: usize,
    stop: impl Future<Output = ()>,
    drained: impl Future<Output = ()>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(max_connections));
    tokio::pin!(stop);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, a connection reset before it was taken: wait
                    // a moment rather than spin.
                    crate::diag!("dspark: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            tokio::spawn(refuse(stream));
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT);
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    drained.await;
    graceful.shutdown().await;
}

/// Answers a connection beyond the cap: 503 in OpenAI's error shape, closed.
async fn refuse(mut stream: tokio::net::TcpStream) {
    let body = r#"{"error":{"message":"too many open connections: retry later","type":"unavailable_error","param":null,"code":503}}"#;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}
