#pragma once
/// \file
/// The data family: IDX reading, MNIST and CIFAR-10 loaders, image augmentation, the dataset pipeline, sharding
/// policies and distributed batches.

#include <mwstrat/data/cifar10.hpp>
#include <mwstrat/data/concepts.hpp>
#include <mwstrat/data/cursor.hpp>
#include <mwstrat/data/dataset.hpp>
#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/epoch_batches.hpp>
#include <mwstrat/data/idx.hpp>
#include <mwstrat/data/image_augmentation.hpp>
#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/data/mnist.hpp>
#include <mwstrat/data/sharding.hpp>
