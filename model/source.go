package model

import "github.com/quantscope/quantscope/formats/checkpoint"

// Checkpoint is the checkpoint the model reads (its source holds the
// tokenizer.json, when the repo ships one).
func (m *Model) Checkpoint() *checkpoint.Checkpoint { return m.c }
