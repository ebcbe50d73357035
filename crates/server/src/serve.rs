//! Running the server: bind, load the model in the background (`/ready`
//! is 503 until it is loaded), serve until SIGINT/SIGTERM, then stop
//! accepting and let in-flight requests finish up to a deadline. With TLS,
//! SIGHUP reloads the certificate and key (a bad pair keeps the old one).

use crate::listen::{self, ConnConfig};
use crate::tls::Tls;
use crate::{router, AppState, Backend, Error};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub conns: ConnConfig,
    pub shutdown_timeout: Duration,
    /// HTTPS instead of plain HTTP.
    pub tls: Option<Arc<Tls>>,
}

/// Reloads `tls` on every SIGHUP, for ever.
async fn reload_on_sighup(tls: Arc<Tls>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP: the TLS certificate will not be reloaded");
            return std::future::pending().await;
        };
        while hup.recv().await.is_some() {
            match tls.reload() {
                Ok(()) => tracing::info!(
                    "SIGHUP: reloaded the TLS certificate {}",
                    tls.cert_path().display()
                ),
                Err(e) => tracing::error!("SIGHUP: {e}; still serving the previous certificate"),
            }
        }
    }
    std::future::pending().await
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// What a loader may fail with before a backend exists (resolving or
/// downloading the model, or [`Backend::load`]'s own errors).
pub type LoadError = Box<dyn std::error::Error + Send + Sync>;

/// Serves `st` on `listener` until `stop` resolves (e.g. [`shutdown_signal`]),
/// then drains for at most `opts.shutdown_timeout`. `load` runs on the
/// blocking pool; its error ends the server with that error.
pub async fn serve(
    st: AppState,
    listener: TcpListener,
    opts: ServeOptions,
    load: impl FnOnce() -> Result<Backend, LoadError> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send,
) -> Result<(), Error> {
    let app = router(st.clone());
    let (quit_tx, quit_rx) = watch::channel(false);
    let server = listen::run(
        listener,
        app,
        opts.conns,
        opts.tls.clone(),
        st.conns.clone(),
        quit_rx,
    );
    let reload = async {
        match opts.tls.clone() {
            Some(tls) => reload_on_sighup(tls).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(server);
    let st2 = st.clone();
    let loader = async move {
        match tokio::task::spawn_blocking(load).await {
            Ok(Ok(b)) => {
                tracing::info!("model {} loaded; ready", b.model_id);
                st2.set_backend(b);
                std::future::pending::<Result<(), Error>>().await
            }
            // A typed error of ours comes back as itself.
            Ok(Err(e)) => Err(match e.downcast::<Error>() {
                Ok(e) => *e,
                Err(e) => Error::Loader(e),
            }),
            Err(e) => Err(Error::Internal(format!("the model loader failed: {e}"))),
        }
    };
    tokio::select! {
        r = &mut server => return r.map_err(Error::Io),
        r = loader => return r,
        () = reload => unreachable!("reloading never ends"),
        () = stop => {}
    }
    tracing::info!(
        "shutting down: no new connections; draining in-flight requests for up to {:?}",
        opts.shutdown_timeout
    );
    st.draining.store(true, Ordering::Relaxed);
    let _ = quit_tx.send(true);
    let r = match tokio::time::timeout(opts.shutdown_timeout, server).await {
        Ok(r) => r.map_err(Error::Io),
        Err(_) => {
            tracing::warn!("shutdown deadline passed with requests in flight; exiting");
            Ok(())
        }
    };
    // The drained requests' spans go out before the process does.
    if let Some(o) = st.otel.clone() {
        let _ = tokio::task::spawn_blocking(move || o.flush()).await;
    }
    r
}
