//! `executorBlockStrategy`: what an agent does with a trigger for a job that has a run going.

use super::wire_enum::wire_enum;

wire_enum! {
    /// XXL-Job's `ExecutorBlockStrategyEnum` names.
    pub enum BlockStrategy {
        /// Queue the new run behind the running one.
        SerialExecution => "SERIAL_EXECUTION",
        /// Refuse the new trigger.
        DiscardLater => "DISCARD_LATER",
        /// Stop the running run and start the new one.
        CoverEarly => "COVER_EARLY",
    }
}
