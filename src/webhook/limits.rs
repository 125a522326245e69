//! What one client, or one tenant, may take from the server (docs/behaviour.md §9a), one job per
//! module: how long a connection may sit idle or take over a request head (`timers`), how many
//! body bytes are buffered at once (`budget`), and the admission places for API-bound work,
//! shared fairly between namespaces (`places`). Reads of names the watches do not know are
//! bounded in [`super::reads`].

pub mod budget;
pub mod places;
pub mod timers;

pub use budget::{drain, Budget, Held, Refused, BODY_BUDGET_BODIES, PROMISE_TIMEOUT, RESERVE_TIMEOUT};
pub use places::{api_place, Gate, Place, Places, Wait};
pub use timers::{watch, HeadClock, Watched, CLIENT_TIMEOUT, IDLE_TIMEOUT};
