#pragma once
/// \file
/// The train family: `fit`/`evaluate`, their concepts, callbacks, model saving and the distributed input.

#include <mwstrat/train/callback.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/callbacks/csv_logger.hpp>
#include <mwstrat/train/callbacks/early_stopping.hpp>
#include <mwstrat/train/callbacks/learning_rate_scheduler.hpp>
#include <mwstrat/train/callbacks/model_checkpoint.hpp>
#include <mwstrat/train/callbacks/progress_logger.hpp>
#include <mwstrat/train/callbacks/reduce_lr_on_plateau.hpp>
#include <mwstrat/train/callbacks/tensorboard.hpp>
#include <mwstrat/train/callbacks/terminate_on_nan.hpp>
#include <mwstrat/train/checkpoint_tensors.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/distributed_input.hpp>
#include <mwstrat/train/fit.hpp>
#include <mwstrat/train/fit_metrics.hpp>
#include <mwstrat/train/in_memory_recovery.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/micro_batches.hpp>
#include <mwstrat/train/preemption.hpp>
#include <mwstrat/train/resume.hpp>
#include <mwstrat/train/sample_weights.hpp>
#include <mwstrat/train/saved_model.hpp>
#include <mwstrat/train/tensor_model.hpp>
#include <mwstrat/train/train_context.hpp>
