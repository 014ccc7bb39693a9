//! The listening socket: every connection is served by hyper with a
//! deadline for its request headers (an idle keep-alive connection waits
//! for headers too, so it is closed after the same time), at most
//! `max_connections` are open at once (one more is answered 503 and
//! closed), and SIGINT/SIGTERM end the server gracefully. axum's own
//! `serve` sets no header deadline and takes every connection, so a few
//! clients that send half a request line could hold the server.

use super::error::ApiError;
use super::limits::Limits;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// Serves `app` on `listener` until `shutdown` resolves, then lets the
/// connections in flight finish (idle ones close at once).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let cap = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(cap));
    let (stop_tx, stop_rx) = watch::channel(false);
    let header_timeout = limits.header_timeout;
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors and the like: wait, then go on.
                    tracing::warn!(target: "famlx::serve", "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, cap));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new()).header_read_timeout(header_timeout);
            let conn = b.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(target: "famlx::serve", "connection ended: {e}");
                    }
                }
                _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    let _ = stop_tx.send(true);
    // Every slot back: every connection has ended.
    let _ = slots.acquire_many(cap as u32).await;
    Ok(())
}

/// Answers a connection past the cap with a 503 in OpenAI's shape and
/// closes it (bounded in time: the client may not read).
async fn refuse(mut stream: TcpStream, cap: usize) {
    let e = ApiError::status(503, format!("the server is busy: {cap} connections are open (--max-connections)"));
    let body = e.body().to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}
