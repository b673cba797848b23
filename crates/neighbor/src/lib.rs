//! castack neighbor
