//! Plan: desired resources against recorded (or observed) state.
