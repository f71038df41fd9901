module @step {
  util.global private @blk.0.w.qs = #flow.parameter.named<"model"::"blk.0.w.qs"> : tensor<128x32x4096xi4>
  util.global private @blk.0.w.d = #flow.parameter.named<"model"::"blk.0.w.d"> : tensor<128x4096xf16>
  func.func @main(%arg0: tensor<1x4096xf32>) -> tensor<1x4096xf32> {
    %qs = util.global.load @blk.0.w.qs : tensor<128x32x4096xi4>
    %d16 = util.global.load @blk.0.w.d : tensor<128x4096xf16>
    %d = stablehlo.convert %d16 : (tensor<128x4096xf16>) -> tensor<128x4096xf32>
    %xb = stablehlo.reshape %arg0 : (tensor<1x4096xf32>) -> tensor<128x32xf32>
    %ax = stablehlo.abs %xb : tensor<128x32xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %amax = stablehlo.reduce(%ax init: %z) applies stablehlo.maximum across dimensions = [1] : (tensor<128x32xf32>, tensor<f32>) -> tensor<128xf32>
    %c127 = stablehlo.constant dense<127.0> : tensor<128xf32>
    %sx = stablehlo.divide %amax, %c127 : tensor<128xf32>
    %one = stablehlo.constant dense<1.0> : tensor<128xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<128xf32>
    %nz = stablehlo.compare GT, %amax, %zero : (tensor<128xf32>, tensor<128xf32>) -> tensor<128xi1>
    %inv0 = stablehlo.divide %c127, %amax : tensor<128xf32>
    %inv = stablehlo.select %nz, %inv0, %one : tensor<128xi1>, tensor<128xf32>
    %invb = stablehlo.broadcast_in_dim %inv, dims = [0] : (tensor<128xf32>) -> tensor<128x32xf32>
    %xs = stablehlo.multiply %xb, %invb : tensor<128x32xf32>
    %xr = stablehlo.round_nearest_even %xs : tensor<128x32xf32>
    %q = stablehlo.convert %xr : (tensor<128x32xf32>) -> tensor<128x32xi8>
    %q3 = stablehlo.reshape %q : (tensor<128x32xi8>) -> tensor<128x1x32xi8>
    %c8 = stablehlo.convert %qs : (tensor<128x32x4096xi4>) -> tensor<128x32x4096xi8>
    %acc = stablehlo.dot_general %q3, %c8, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<128x1x32xi8>, tensor<128x32x4096xi8>) -> tensor<128x1x4096xi32>
    %accf = stablehlo.convert %acc : (tensor<128x1x4096xi32>) -> tensor<128x1x4096xf32>
    %d3 = stablehlo.reshape %d : (tensor<128x4096xf32>) -> tensor<128x1x4096xf32>
    %sx3 = stablehlo.broadcast_in_dim %sx, dims = [0] : (tensor<128xf32>) -> tensor<128x1x4096xf32>
    %s = stablehlo.multiply %d3, %sx3 : tensor<128x1x4096xf32>
    %p = stablehlo.multiply %accf, %s : tensor<128x1x4096xf32>
    %r = stablehlo.reduce(%p init: %z) applies stablehlo.add across dimensions = [0] : (tensor<128x1x4096xf32>, tensor<f32>) -> tensor<1x4096xf32>
    return %r : tensor<1x4096xf32>
  }
}
