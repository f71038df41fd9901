module @step {
  util.global private @blk.0.w.qs = #flow.parameter.named<"model"::"blk.0.w.qs"> : tensor<128x32x4096xi4>
  util.global private @blk.0.w.d = #flow.parameter.named<"model"::"blk.0.w.d"> : tensor<128x4096xf16>
  func.func @main(%arg0: tensor<1x4096xf32> {tapeout.name = "x"}) -> (tensor<1x4096xf32> {tapeout.name = "h0"}) {
    %v0 = util.global.load @blk.0.w.qs : tensor<128x32x4096xi4>
    %v1 = util.global.load @blk.0.w.d : tensor<128x4096xf16>
    %v2 = stablehlo.convert %v1 : (tensor<128x4096xf16>) -> tensor<128x4096xf32>
    %v3 = stablehlo.convert %v0 : (tensor<128x32x4096xi4>) -> tensor<128x32x4096xf32>
    %v4 = stablehlo.reshape %v2 : (tensor<128x4096xf32>) -> tensor<128x1x4096xf32>
    %v5 = stablehlo.reshape %arg0 : (tensor<1x4096xf32>) -> tensor<1x128x32xf32>
    %v6 = stablehlo.transpose %v5, dims = [1, 0, 2] : (tensor<1x128x32xf32>) -> tensor<128x1x32xf32>
    %v7 = stablehlo.dot_general %v6, %v3, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<128x1x32xf32>, tensor<128x32x4096xf32>) -> tensor<128x1x4096xf32>
    %v8 = stablehlo.multiply %v7, %v4 : tensor<128x1x4096xf32>
    %v9 = stablehlo.constant dense<0x3F800000> : tensor<128xf32>
    %v10 = stablehlo.dot_general %v9, %v8, contracting_dims = [0] x [0] : (tensor<128xf32>, tensor<128x1x4096xf32>) -> tensor<1x4096xf32>
    return %v10 : tensor<1x4096xf32>
  }
}
