module @linear {
  util.global private @fc.weight = #flow.parameter.named<"model"::"fc.weight"> : tensor<4x3xf32>
  util.global private @fc.bias = #flow.parameter.named<"model"::"fc.bias"> : tensor<3xf32>
  func.func @main(%arg0: tensor<2x4xf32> {tapeout.name = "x"}) -> (tensor<2x3xf32> {tapeout.name = "y"}) {
    %v0 = util.global.load @fc.weight : tensor<4x3xf32>
    %v1 = util.global.load @fc.bias : tensor<3xf32>
    %v2 = stablehlo.dot_general %arg0, %v0, contracting_dims = [1] x [0] : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    %v3 = stablehlo.broadcast_in_dim %v1, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
    %v4 = stablehlo.add %v2, %v3 : tensor<2x3xf32>
    return %v4 : tensor<2x3xf32>
  }
}
