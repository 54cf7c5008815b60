#pragma once
/// \file
/// The data family: IDX reading, MNIST and CIFAR-10 loaders, TFRecord files of `tf.train.Example`s (reader,
/// writer, feature specs, file lists), image augmentation, the dataset pipeline, sharding policies and distributed
/// batches. The PNG/JPEG decoders of image features (data/images/) are the optional component `mwstrat::images`
/// (libpng, libjpeg) and are not included here.

#include <mwstrat/data/cifar10.hpp>
#include <mwstrat/data/concepts.hpp>
#include <mwstrat/data/cursor.hpp>
#include <mwstrat/data/dataset.hpp>
#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/epoch_batches.hpp>
#include <mwstrat/data/example.hpp>
#include <mwstrat/data/feature_spec.hpp>
#include <mwstrat/data/file_list.hpp>
#include <mwstrat/data/idx.hpp>
#include <mwstrat/data/image_augmentation.hpp>
#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/data/image_record_format.hpp>
#include <mwstrat/data/indexed_tfrecord_file.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/data/mnist.hpp>
#include <mwstrat/data/record_batches.hpp>
#include <mwstrat/data/record_location.hpp>
#include <mwstrat/data/sharding.hpp>
#include <mwstrat/data/tfrecord.hpp>
#include <mwstrat/data/tfrecord_writer.hpp>
