//! Controller loops (SPEC §7–9): propagation, adoption, repair and garbage collection.
//! One replica runs them at a time.

use std::sync::Arc;

use crate::cli::ControllerArgs;
use crate::server::App;

/// Starts the controller loops in the background.
pub fn spawn(_client: kube::Client, _app: Arc<App>, _args: ControllerArgs) {
    tracing::info!("controller loops are not enabled in this build");
}
